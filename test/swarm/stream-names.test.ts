import { expect, test } from "vitest";
import {
  consumerName,
  deadStream,
  eventsStream,
  queueStream,
  queueWorkSubject,
  stateStream,
  swarmHex,
  swarmNameProblem,
  swarmOfStream,
  swarmStreams,
} from "../../src/swarm-bus/index.js";

/**
 * Stream, subject and consumer names are wire contracts with existing
 * peers: spelled exactly as the specification spells them.
 */

test("the specification's example is a test vector: other / spoke-work", () => {
  expect(swarmHex("rig")).toBe("726967");
  expect(stateStream("other", "spoke-work").name).toBe("AGENTIHOOKS-6f74686572-h-bfdb74b91986464723022e957a6d5e52d6a5eb0070241ac54c0c979b13c398a6");
  expect(stateStream("other", "spoke-work").legacyName).toBe("AGENTIHOOKS_6f74686572_STATE_spoke-work");
});

test("every resource of a swarm, in both name formats, with its subjects", () => {
  expect(eventsStream("rig")).toMatchObject({ name: "AGENTIHOOKS-726967-EVENTS", legacyName: "AGENTIHOOKS_726967_EVENTS", subjects: ["swarm.rig.events.>"] });
  expect(deadStream("rig")).toMatchObject({ name: "AGENTIHOOKS-726967-DEAD", legacyName: "AGENTIHOOKS_726967_DEAD", subjects: ["swarm.rig.dead.>"] });
  expect(queueStream("rig", "eng").name).toMatch(/^AGENTIHOOKS-726967-h-[0-9a-f]{64}$/);
  expect(queueStream("rig", "eng")).toMatchObject({ legacyName: "AGENTIHOOKS_726967_QUEUE_eng", subjects: ["swarm.rig.queue.eng.>"] });
  expect(queueWorkSubject("rig", "eng")).toBe("swarm.rig.queue.eng.work");
  const streams = swarmStreams("rig");
  expect(streams.map((s) => s.kind)).toEqual(["events", "dead", "queue", "queue", "queue", "state", "state", "state", "state", "state"]);
  expect(streams.filter((s) => s.kind === "state").map((s) => s.bucket)).toEqual(["spoke-work", "spoke-pending", "hive-presence", "hive-executions", "execution-starts"]);
  for (const s of streams) expect(s.name).toMatch(/^[A-Za-z0-9-]+$/);
});

test("a stream name gives back its swarm in either format, UTF-8 included", () => {
  expect(swarmOfStream("AGENTIHOOKS-726967-EVENTS")).toBe("rig");
  expect(swarmOfStream("AGENTIHOOKS_6f74686572_STATE_spoke-work")).toBe("other");
  expect(swarmOfStream(queueStream("ç-swarm", "ci").name)).toBe("ç-swarm");
  expect(swarmOfStream("AGENTIHOOKS-EVENTS")).toBeUndefined();
  expect(swarmOfStream("AGENTIHOOKS_DEAD")).toBeUndefined();
  expect(swarmOfStream("KV_spoke-work")).toBeUndefined();
  expect(swarmOfStream("AGENTIHOOKS-ff-EVENTS")).toBeUndefined(); // not UTF-8
});

test("consumer names keep their identity when valid, and take the reserved digest otherwise", () => {
  expect(consumerName("eng")).toBe("eng");
  const long = `reactor-${"x".repeat(200)}`;
  expect(consumerName(long)).toBe(long);
  expect(consumerName("reactor_one")).toMatch(/^h-[0-9a-f]{64}$/);
  expect(consumerName("h-looks-reserved")).toMatch(/^h-[0-9a-f]{64}$/);
  expect(consumerName("reactor_one")).not.toBe(consumerName("reactor-one"));
});

test.each([
  ["rig", undefined],
  ["rig-grade-swarm", undefined],
  ["a.b", "'a.b' contains '.'"],
  ["a*", "'a*' contains '*'"],
  ["a>", "'a>' contains '>'"],
  ["a b", "'a b' contains whitespace"],
  ["tab\there", "'tab\\u0009here' contains whitespace"],
  ["", "a swarm name is empty"],
  ["x".repeat(65), `'${"x".repeat(64)}…' is longer than 64 bytes`],
])("swarm name %j: %s", (name, problem) => {
  expect(swarmNameProblem(name)).toBe(problem);
});
