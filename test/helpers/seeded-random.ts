/** A small seeded PRNG (mulberry32), so a random run can be repeated from its seed. */
export class SeededRandom {
  #state: number;

  constructor(readonly seed: number) {
    this.#state = seed >>> 0;
  }

  /** A float in [0, 1). */
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error("pick from an empty list");
    return items[this.int(0, items.length - 1)]!;
  }

  /** 32 lowercase hexadecimal characters. */
  hexId(): string {
    let id = "";
    for (let i = 0; i < 4; i++) id += Math.floor(this.next() * 2 ** 32).toString(16).padStart(8, "0");
    return id;
  }
}
