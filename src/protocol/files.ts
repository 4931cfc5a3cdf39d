/**
 * Creating a file that must never be overwritten nor seen half written (key files, pinned keys).
 * Runtime-neutral: `node:fs/promises` and `node:path` only.
 */
import { link, open, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

/**
 * Creates `path` holding `text` unless it exists (then false). The text is written in full and
 * synced under a temporary name, then link()ed to `path`: link() fails with EEXIST instead of
 * overwriting, so of two writers racing one wins and the other sees false. The temporary name
 * starts with "." (never a client id, never a key name) and is removed whatever happens.
 */
export async function writeNewFile(path: string, text: string, mode: number): Promise<boolean> {
  const temp = join(dirname(path), `.${basename(path)}.${crypto.randomUUID()}.tmp`);
  try {
    const file = await open(temp, "wx", mode);
    try {
      await file.writeFile(text);
      await file.sync(); // a key or a pin lost in a crash would let another key take its place
    } finally {
      await file.close();
    }
    await link(temp, path);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw error;
  } finally {
    await unlink(temp).catch(() => {});
  }
}
