import { getEventListeners } from "node:events";
import { expect, test } from "vitest";
import { sleep } from "../../src/participant/participant.js";

// The participant waits after every refused claim; each wait must leave
// nothing on the run's abort signal (a listener per wait leaks, and Node
// warns of a possible leak after 10).
test("a wait that ends on its timer leaves no abort listener behind", async () => {
  const controller = new AbortController();
  for (let i = 0; i < 20; i++) await sleep(1, controller.signal);
  expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
});

test("a wait ends at once when the signal aborts, and on an already aborted signal", async () => {
  const controller = new AbortController();
  const waiting = sleep(3_600_000, controller.signal);
  controller.abort();
  await waiting;
  await sleep(3_600_000, controller.signal);
  expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
});
