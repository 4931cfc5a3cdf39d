/**
 * The rejections nobody handled while `work` ran and two turns of the event loop after it: a
 * broker ends on one (Bun ends the process), so a test of a failure path asserts there are none.
 */
export async function unhandledRejectionsOf(work: () => void | Promise<void>): Promise<unknown[]> {
  const unhandled: unknown[] = [];
  const record = (reason: unknown) => void unhandled.push(reason);
  process.on("unhandledRejection", record);
  try {
    await work();
    for (let turn = 0; turn < 2; turn++) await new Promise((resolve) => setImmediate(resolve));
    return unhandled;
  } finally {
    process.off("unhandledRejection", record);
  }
}
