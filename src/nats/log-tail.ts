/**
 * Keeps the last lines a child process wrote, for diagnostics.
 *
 * Why bounded: nats-server runs for the life of Laneway and may log a lot;
 * only the lines around a failure are useful, and memory must not grow.
 * The lines can contain addresses and paths, so they are exposed as a field
 * for operators and never copied into error messages.
 */
export class LogTail {
  readonly #limit: number;
  readonly #lines: string[] = [];
  #partial = "";

  constructor(limit = 200) {
    this.#limit = Math.max(1, limit);
  }

  /** Appends a chunk of output; a trailing partial line waits for its end. */
  write(chunk: Buffer | string): void {
    const text = this.#partial + chunk.toString();
    const parts = text.split(/\r?\n/);
    this.#partial = parts.pop() ?? "";
    for (const line of parts) this.#push(line);
    if (this.#partial.length > 16_384) {
      this.#push(this.#partial);
      this.#partial = "";
    }
  }

  /** The retained lines, oldest first, including an unterminated last line. */
  lines(): string[] {
    return this.#partial === "" ? [...this.#lines] : [...this.#lines, this.#partial];
  }

  #push(line: string): void {
    this.#lines.push(line);
    if (this.#lines.length > this.#limit) this.#lines.splice(0, this.#lines.length - this.#limit);
  }
}
