/**
 * Where a JSON text stops being JSON, as a line and column. Bun's `JSON.parse` says what it
 * disliked ("Unexpected token '}'") but not where, and an operator with a 200-line config file
 * needs the place. This scanner runs only after `JSON.parse` failed: it follows the JSON grammar
 * (RFC 8259) just far enough to find the first byte that breaks it.
 */

export interface JsonErrorPosition {
  /** 1-based line and column (a column counts UTF-16 code units, as editors mostly do). */
  line: number;
  column: number;
  /** What was found there: `'}'`, `end of file`. */
  found: string;
}

class Stop extends Error {
  constructor(readonly at: number) {
    super("stop");
  }
}

/** Nesting deeper than this is reported as an error where it happens (no config nests so deep). */
const MAX_DEPTH = 512;

/** The position of the first syntax error in `text`, or null when `text` is valid JSON. */
export function jsonErrorPosition(text: string): JsonErrorPosition | null {
  let i = 0;
  const fail = (): never => {
    throw new Stop(i);
  };
  const space = () => {
    while (i < text.length && (text[i] === " " || text[i] === "\t" || text[i] === "\n" || text[i] === "\r")) i++;
  };
  const literal = (word: string) => {
    for (const char of word) {
      if (text[i] !== char) fail();
      i++;
    }
  };
  const string = () => {
    i++; // the opening quote
    while (i < text.length && text[i] !== '"') {
      const code = text.charCodeAt(i);
      if (code < 0x20) fail();
      if (text[i] === "\\") {
        i++;
        if (text[i] === "u") {
          for (let k = 1; k <= 4; k++) if (!/[0-9a-fA-F]/.test(text[i + k] ?? "")) (i += k, fail());
          i += 5;
          continue;
        }
        if (!'"\\/bfnrt'.includes(text[i] ?? "x")) fail();
      }
      i++;
    }
    if (i >= text.length) fail();
    i++;
  };
  const digits = () => {
    if (!/[0-9]/.test(text[i] ?? "")) fail();
    while (/[0-9]/.test(text[i] ?? "")) i++;
  };
  const number = () => {
    if (text[i] === "-") i++;
    if (text[i] === "0") i++;
    else digits();
    if (text[i] === ".") (i++, digits());
    if (text[i] === "e" || text[i] === "E") {
      i++;
      if (text[i] === "+" || text[i] === "-") i++;
      digits();
    }
  };
  const value = (depth: number): void => {
    space();
    if (depth > MAX_DEPTH) fail();
    const char = text[i];
    if (char === "{") {
      i++;
      space();
      if (text[i] === "}") return void i++;
      for (;;) {
        space();
        if (text[i] !== '"') fail();
        string();
        space();
        if (text[i] !== ":") fail();
        i++;
        value(depth + 1);
        space();
        if (text[i] === "}") return void i++;
        if (text[i] !== ",") fail();
        i++;
      }
    }
    if (char === "[") {
      i++;
      space();
      if (text[i] === "]") return void i++;
      for (;;) {
        value(depth + 1);
        space();
        if (text[i] === "]") return void i++;
        if (text[i] !== ",") fail();
        i++;
      }
    }
    if (char === '"') return string();
    if (char === "t") return literal("true");
    if (char === "f") return literal("false");
    if (char === "n") return literal("null");
    if (char === "-" || (char !== undefined && char >= "0" && char <= "9")) return number();
    fail();
  };
  try {
    value(0);
    space();
    if (i < text.length) fail();
    return null;
  } catch (error) {
    if (!(error instanceof Stop)) throw error;
    return positionOf(text, error.at);
  }
}

function positionOf(text: string, offset: number): JsonErrorPosition {
  let line = 1;
  let lineStart = 0;
  for (let k = 0; k < offset && k < text.length; k++) {
    if (text[k] === "\n") {
      line++;
      lineStart = k + 1;
    }
  }
  const found = offset >= text.length ? "end of file" : JSON.stringify(text[offset]);
  return { line, column: offset - lineStart + 1, found };
}
