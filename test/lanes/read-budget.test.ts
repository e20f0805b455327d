import { describe, expect, test } from "vitest";
import { ReadBudget } from "../../src/lanes/read-budget.js";

/**
 * The byte budget reads take from before each pull: it never grants more
 * than it holds, serves readers in the order they asked, gives a reader
 * that asks for more than the whole budget the whole budget, and lets a
 * waiting reader leave at once when its signal aborts.
 */

const settled = async <T>(promise: Promise<T>): Promise<boolean> => {
  let done = false;
  void promise.then(
    () => (done = true),
    () => (done = true),
  );
  // Let every pending reaction run.
  await new Promise((resolve) => setImmediate(resolve));
  return done;
};

describe("ReadBudget", () => {
  test("grants while bytes are free, and a waiter once enough come back", async () => {
    const budget = new ReadBudget(100);
    const a = await budget.acquire(60);
    const b = await budget.acquire(40);
    expect(budget.available).toBe(0);
    const c = budget.acquire(50);
    expect(await settled(c)).toBe(false);
    expect(budget.waiting).toBe(1);
    b.release();
    expect(await settled(c)).toBe(false);
    a.release();
    const granted = await c;
    expect(granted.bytes).toBe(50);
    expect(budget.available).toBe(50);
    // Releasing twice gives nothing back twice.
    a.release();
    expect(budget.available).toBe(50);
    granted.release();
    expect(budget.available).toBe(100);
  });

  test("readers are served in the order they asked: a small one does not pass a large one waiting before it", async () => {
    const budget = new ReadBudget(100);
    const held = await budget.acquire(90);
    const order: string[] = [];
    const large = budget.acquire(80).then((g) => (order.push("large"), g));
    const small = budget.acquire(5).then((g) => (order.push("small"), g));
    expect(await settled(small)).toBe(false);
    held.release();
    const [l, s] = await Promise.all([large, small]);
    expect(order).toEqual(["large", "small"]);
    expect(budget.available).toBe(15);
    l.release();
    s.release();
    expect(budget.available).toBe(100);
  });

  test("a request larger than the budget gets the whole budget", async () => {
    const budget = new ReadBudget(100);
    const grant = await budget.acquire(1_000);
    expect(grant.bytes).toBe(100);
    expect(budget.available).toBe(0);
    grant.release();
    expect(budget.available).toBe(100);
  });

  test("a waiting reader whose signal aborts leaves the line with the signal's reason, and the readers behind it move up", async () => {
    const budget = new ReadBudget(100);
    const held = await budget.acquire(60);
    const abort = new AbortController();
    const blocked = budget.acquire(80, abort.signal);
    const behind = budget.acquire(30);
    expect(await settled(behind)).toBe(false);
    const reason = new DOMException("the call was canceled", "AbortError");
    abort.abort(reason);
    await expect(blocked).rejects.toBe(reason);
    const granted = await behind;
    expect(granted.bytes).toBe(30);
    expect(budget.waiting).toBe(0);
    granted.release();
    held.release();
    expect(budget.available).toBe(100);
  });

  test("an aborted signal is refused at once; a granted reader's later abort changes nothing", async () => {
    const budget = new ReadBudget(100);
    const abort = new AbortController();
    abort.abort(new DOMException("gone", "AbortError"));
    await expect(budget.acquire(10, abort.signal)).rejects.toThrow("gone");
    expect(budget.available).toBe(100);
    const live = new AbortController();
    const held = await budget.acquire(100);
    const waiting = budget.acquire(10, live.signal);
    held.release();
    const granted = await waiting;
    live.abort();
    expect(budget.available).toBe(90);
    granted.release();
    expect(budget.available).toBe(100);
  });

  test("a budget needs a positive capacity", () => {
    expect(() => new ReadBudget(0)).toThrow(RangeError);
  });
});
