/**
 * What the CLI reports when a command fails: a code of the one catalogue (the admin API's own
 * code when the broker refused; USAGE for a wrong command line, which exits 2; UNREACHABLE when
 * no broker answers) and a message. main.ts prints it, or `{code, message}` with `--json`.
 */
import type { ErrorCode } from "../protocol/errors.ts";

export class CliError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: unknown,
    /** True for the admin API's refusals: shown as `CODE: message`, as the API said it. */
    readonly fromApi = false,
  ) {
    super(message);
    this.name = "CliError";
  }
}
