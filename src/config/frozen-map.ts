/**
 * A Map that cannot be changed after construction.
 *
 * `Object.freeze` does not freeze a Map's entries and `ReadonlyMap` is only
 * a compile-time view, so a loaded configuration held in plain Maps could
 * still be mutated at run time by any code that casts. The configuration is
 * shared by every request handler; this makes it immutable for real.
 */
export class FrozenMap<K, V> extends Map<K, V> {
  #sealed = false;

  constructor(entries: Iterable<readonly [K, V]> = []) {
    super();
    for (const [key, value] of entries) super.set(key, value);
    this.#sealed = true;
    Object.freeze(this);
  }

  override set(key: K, value: V): this {
    if (this.#sealed) throw new TypeError("this map is frozen");
    return super.set(key, value);
  }

  override delete(_key: K): boolean {
    throw new TypeError("this map is frozen");
  }

  override clear(): void {
    throw new TypeError("this map is frozen");
  }
}
