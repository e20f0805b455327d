import { describe, expect, test } from "vitest";
import { checkEventSwarm, logicalSubject, queueStream, routeQueue, routeSubject, type BusEvent, type BusMode } from "../../../src/swarm-bus/index.js";

/**
 * The subject and queue tables, row by row: what each logical name becomes
 * in each mode, and the exact refusal when it does not belong to the bus.
 */

type Expect = { kind: "event" | "dead"; swarm: string; subjects: string[] } | { error: string };

const subjectRows: [BusMode, string | undefined, string, "publish" | "read", Expect][] = [
  // Scoped: execution events go to the swarm's events stream.
  ["scoped", "rig", "swarm.rig.execution.started", "publish", { kind: "event", swarm: "rig", subjects: ["swarm.rig.events.execution.started"] }],
  ["scoped", undefined, "swarm.rig.execution.started", "publish", { kind: "event", swarm: "rig", subjects: ["swarm.rig.events.execution.started"] }],
  ["scoped", "rig", "swarm.*.execution.>", "read", { kind: "event", swarm: "rig", subjects: ["swarm.rig.events.execution.>"] }],
  ["scoped", "rig", "swarm.rig.execution.>", "read", { kind: "event", swarm: "rig", subjects: ["swarm.rig.events.execution.>"] }],
  ["scoped", "rig", "swarm.*.execution.started", "read", { kind: "event", swarm: "rig", subjects: ["swarm.rig.events.execution.started"] }],
  ["scoped", "rig", "swarm.rig.events.reactor.tick", "publish", { kind: "event", swarm: "rig", subjects: ["swarm.rig.events.reactor.tick"] }],
  // Scoped: dead letters.
  ["scoped", "rig", "dead.rig", "publish", { kind: "dead", swarm: "rig", subjects: ["swarm.rig.dead.event"] }],
  ["scoped", undefined, "dead.rig", "publish", { kind: "dead", swarm: "rig", subjects: ["swarm.rig.dead.event"] }],
  ["scoped", "rig", "swarm.rig.dead.e-17", "publish", { kind: "dead", swarm: "rig", subjects: ["swarm.rig.dead.e-17"] }],
  // Scoped refusals.
  ["scoped", "rig", "swarm.other.execution.started", "publish", { error: "subject 'swarm.other.execution.started' does not belong to swarm 'rig'" }],
  ["scoped", "rig", "swarm.other.execution.>", "read", { error: "subject 'swarm.other.execution.>' does not belong to swarm 'rig'" }],
  ["scoped", "rig", "dead.other", "publish", { error: "subject 'dead.other' does not belong to swarm 'rig'" }],
  ["scoped", "rig", "swarm.other.events.x", "publish", { error: "subject 'swarm.other.events.x' does not belong to swarm 'rig'" }],
  ["scoped", "rig", "legacy.swarm.rig.execution.started", "publish", { error: "subject 'legacy.swarm.rig.execution.started' does not belong to swarm 'rig'" }],
  ["scoped", "rig", "slots.rig.hive-a", "publish", { error: "subject 'slots.rig.hive-a' does not belong to swarm 'rig'" }],
  ["scoped", undefined, "foo.bar", "publish", { error: "subject 'foo.bar' does not name a swarm" }],
  ["scoped", undefined, "swarm.*.execution.>", "read", { error: "select a swarm before reading scoped events" }],
  ["scoped", "rig", "swarm.*.execution.started", "publish", { error: "subject 'swarm.*.execution.started' is not a valid subject for this call" }],
  ["scoped", "rig", "swarm.rig..execution", "publish", { error: "subject 'swarm.rig..execution' is not a valid subject for this call" }],
  // Unscoped (legacy): legacy.swarm.… preferred, the original subject kept as the fallback.
  [
    "unscoped",
    undefined,
    "swarm.rig.execution.started",
    "publish",
    { kind: "event", swarm: "rig", subjects: ["legacy.swarm.rig.execution.started", "swarm.rig.execution.started"] },
  ],
  ["unscoped", undefined, "swarm.*.execution.>", "read", { kind: "event", swarm: "*", subjects: ["legacy.swarm.*.execution.>", "swarm.*.execution.>"] }],
  ["unscoped", "rig", "swarm.other.execution.started", "publish", { kind: "event", swarm: "other", subjects: ["legacy.swarm.other.execution.started", "swarm.other.execution.started"] }],
  ["unscoped", undefined, "legacy.swarm.rig.execution.x", "publish", { kind: "event", swarm: "rig", subjects: ["legacy.swarm.rig.execution.x"] }],
  ["unscoped", "rig", "dead.rig", "publish", { kind: "dead", swarm: "rig", subjects: ["dead.rig"] }],
  ["unscoped", undefined, "swarm.rig.events.x", "publish", { error: "subject 'swarm.rig.events.x' is not a valid subject for this call" }],
];

describe("the subject table", () => {
  test.each(subjectRows)("%s bus of %s: %s (%s)", (mode, busSwarm, subject, use, expected) => {
    const attempt = () => routeSubject(mode, busSwarm, subject, use);
    if ("error" in expected) {
      expect(attempt).toThrow(expected.error);
      try {
        attempt();
      } catch (error) {
        expect((error as Error).message).toBe(expected.error);
      }
      return;
    }
    const route = attempt();
    expect({ kind: route.kind, swarm: route.swarm, subjects: route.subjects }).toEqual(expected);
  });
});

const logicalRows: [string, string][] = [
  ["swarm.rig.events.execution.started", "swarm.rig.execution.started"],
  ["swarm.rig.dead.event", "dead.rig"],
  ["legacy.swarm.rig.execution.started", "swarm.rig.execution.started"],
  ["swarm.rig.dead.e-17", "swarm.rig.dead.e-17"],
  ["swarm.rig.execution.started", "swarm.rig.execution.started"],
];

describe("stored subjects read back as logical ones", () => {
  test.each(logicalRows)("%s → %s", (physical, logical) => {
    expect(logicalSubject(physical)).toBe(logical);
  });
});

type QueueExpect = { stream: string; offer: string; consumer: string; swarm: string | undefined } | { error: string };

const queueRows: [BusMode, string | undefined, string, QueueExpect][] = [
  ["scoped", "rig", "swarm.rig.ready.eng", { stream: queueStream("rig", "eng").name, offer: "swarm.rig.queue.eng.work", consumer: "eng", swarm: "rig" }],
  ["scoped", undefined, "swarm.rig.ready.ci", { stream: queueStream("rig", "ci").name, offer: "swarm.rig.queue.ci.work", consumer: "ci", swarm: "rig" }],
  ["scoped", "rig", "swarm.rig.ready.plan", { stream: queueStream("rig", "plan").name, offer: "swarm.rig.queue.plan.work", consumer: "plan", swarm: "rig" }],
  ["scoped", undefined, "eng", { error: "select a swarm before opening a scoped queue" }],
  ["scoped", undefined, "swarm.rig.queue.eng", { error: "select a swarm before opening a scoped queue" }],
  ["scoped", "rig", "eng", { error: "queue 'eng' does not belong to swarm 'rig'" }],
  ["scoped", "rig", "swarm.other.ready.eng", { error: "queue 'swarm.other.ready.eng' does not belong to swarm 'rig'" }],
  ["scoped", "rig", "swarm.rig.ready.deploy", { error: "queue 'swarm.rig.ready.deploy' does not belong to swarm 'rig'" }],
  ["scoped", undefined, "swarm.rig.ready.deploy", { error: "queue 'swarm.rig.ready.deploy' does not belong to swarm 'rig'" }],
  ["unscoped", undefined, "swarm.rig.ready.eng", { stream: "AGENTIHOOKS_QUEUE_swarm_rig_ready_eng", offer: "swarm.rig.ready.eng", consumer: "eng", swarm: "rig" }],
  ["unscoped", "rig", "swarm.other.ready.eng", { stream: "AGENTIHOOKS_QUEUE_swarm_other_ready_eng", offer: "swarm.other.ready.eng", consumer: "eng", swarm: "other" }],
  ["unscoped", undefined, "work.main", { stream: "AGENTIHOOKS_QUEUE_work_main", offer: "work.main", consumer: "main", swarm: undefined }],
  ["unscoped", undefined, "work.*", { error: "queue 'work.*' is not a valid queue name" }],
];

describe("the queue table", () => {
  test.each(queueRows)("%s bus of %s: %s", (mode, busSwarm, name, expected) => {
    const attempt = () => routeQueue(mode, busSwarm, name);
    if ("error" in expected) {
      let message: string | undefined;
      try {
        attempt();
      } catch (error) {
        message = (error as Error).message;
      }
      expect(message).toBe(expected.error);
      return;
    }
    const route = attempt();
    const stream = route.mode === "scoped" ? route.stream.name : route.streamName;
    expect({ stream, offer: route.offerSubject, consumer: route.consumer, swarm: route.swarm }).toEqual(expected);
  });
});

const eventRows: [BusMode, string, BusEvent, string | undefined][] = [
  ["scoped", "rig", { swarm: "other", id: 1 }, "event swarm 'other' does not match bus swarm 'rig'"],
  ["scoped", "rig", { swarm: "rig", id: 1 }, undefined],
  ["scoped", "rig", { id: 1 }, undefined],
  ["unscoped", "rig", { swarm: "other" }, undefined],
];

describe("an event's swarm field", () => {
  test.each(eventRows)("%s bus of %s: %j", (mode, swarm, event, error) => {
    let message: string | undefined;
    try {
      checkEventSwarm(mode, swarm, event);
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toBe(error);
  });
});
