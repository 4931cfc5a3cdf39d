/**
 * GET /: the dashboard, one self-contained page (inline CSS and script, no external asset), so
 * it ships inside the compiled binary. The HTML files are imported as text (Bun's `type: "text"`
 * import attribute), and the page is assembled once at load.
 *
 * The page carries no broker data: its script fetches the JSON routes with the token the
 * operator enters, so serving it needs no token. A Content-Security-Policy with the hashes of
 * the inline style and script blocks everything else (no injected script can run, even if a
 * message body contained markup, and the page talks only to this origin).
 */
import { createHash } from "node:crypto";
import { Hono } from "hono";
import type { BrokerServer } from "../server/mod.ts";
import { VERSION } from "../version.ts";
import shellText from "./dashboard.html" with { type: "text" };
import scriptText from "./dashboard_app.html" with { type: "text" };

// bun-types declares *.html imports as HTML bundles; with `type: "text"` they are strings.
const SHELL = shellText as unknown as string;
const SCRIPT = (scriptText as unknown as string).trim();

const inner = (html: string, tag: string) => html.slice(html.indexOf(">", html.indexOf(`<${tag}`)) + 1, html.lastIndexOf(`</${tag}>`));
const sha256 = (text: string) => `'sha256-${createHash("sha256").update(text).digest("base64")}'`;

const CSP = [
  "default-src 'none'",
  `script-src ${sha256(inner(SCRIPT, "script"))}`,
  `style-src ${sha256(inner(SHELL, "style"))}`,
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

/** The page with its boot data (a JSON block, not script: no hash needed, nothing executes). */
export function dashboardPage(pollInterval: number): string {
  const boot = JSON.stringify({ pollInterval, version: VERSION }).replace(/</g, "\\u003c");
  return SHELL
    // Replacer functions: a string replacement would expand "$&"-like patterns of the script.
    .replace("<!--BOOT-->", () => `<script type="application/json" id="boot">${boot}</script>`)
    .replace("<!--SCRIPT-->", () => SCRIPT);
}

export function dashboardRoutes(server: BrokerServer): Hono {
  const app = new Hono();
  app.get("/", (c) => {
    c.header("Content-Security-Policy", CSP);
    c.header("Referrer-Policy", "no-referrer");
    return c.html(dashboardPage(server.broker.config.pollIntervalHTTP));
  });
  return app;
}
