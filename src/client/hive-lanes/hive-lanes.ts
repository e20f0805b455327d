/**
 * The hive as a lane participant (the specification's "Hive adapter"): with
 * HIVE_LANES_* set (hive-lanes-settings.ts), the hub joins a lane as an
 * ordinary project, through the participant library over the generated
 * client — the same calls any project makes, to any Laneway (possibly this
 * one).
 *
 * - Snapshot requests. For each project of HIVE_LANES_SNAPSHOT_PROJECTS the
 *   participant registers one handler of `hive-governor-snapshot-request-v1`
 *   work from that publisher; without the allowlist no handler exists. The
 *   participant nacks, unexecuted, every record without a handler (another
 *   schema, another publisher). The handler refuses any payload but `{}`
 *   (the work fails and is nacked), only reads hub state (members, their
 *   scopes, retirements, migration marks) and publishes one correlated
 *   `hive-governor-snapshot-v1` event (hive-lanes-events.ts) before the work
 *   is acked. Delivery is at least once: a retry may publish another
 *   snapshot when the state changed in between.
 * - Mode changes. Every committed scope, invite and retirement of the hub is
 *   published as a `hive-governor-mode-change-v1` event, in commit order,
 *   after the change is stored. This is not an outbox: when the lane cannot
 *   be reached the adapter logs that durable delivery of the transition was
 *   not confirmed, and the hub state change stands.
 *
 * Lane membership is not a write authority: the handlers read the hub and
 * write only their own events.
 *
 * The adapter is a Connect client of a lane, not part of the swarm core:
 * the swarm binding gives it the hub, a reader of the hub's migration marks
 * (src/swarm) and a generated lane client.
 */
import { RecordKind } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { safeErrorFields, type Logger } from "../../log/logger.js";
import { Participant, type ClaimedWork, type ParticipantOptions } from "../../participant/index.js";
import { SwarmError, type HiveHub, type HubModeChange, type MigrationMarksReader } from "../../swarm/index.js";
import { checkSnapshotRequest, HIVE_SCHEMAS, modeChangeEvent, snapshotEvent } from "./hive-lanes-events.js";
import type { HiveLanesSettings } from "./hive-lanes-settings.js";

/** A generated LaneService client carrying the hive's project token. */
export type LaneClient = ParticipantOptions["client"];

/** A reader that reports no marks (a hub without a broker connection to read them from). */
export const noMigrationMarks: MigrationMarksReader = async () => [];

/** What the adapter reads of the hub: its members, and its committed mode changes. */
export type HubView = Pick<HiveHub, "listMembers" | "onModeChange">;

export interface HiveLanesOptions {
  readonly settings: HiveLanesSettings;
  readonly client: LaneClient;
  readonly hub: HubView;
  readonly log: Logger;
  readonly readMigrationMarks?: MigrationMarksReader;
  /** Snapshot requests handled at once (default 4). */
  readonly concurrency?: number;
  /** How long an idle claim waits for work (default 10 s). */
  readonly waitMs?: number;
  /** Attempts to publish one mode change before giving up (default 3, same record id each time). */
  readonly publishAttempts?: number;
  /** Deadline of each publication (default 10 s). */
  readonly publishTimeoutMs?: number;
}

export class HiveLanes {
  readonly #o: HiveLanesOptions;
  readonly #participant: Participant;
  readonly #stopping = new AbortController();
  readonly #unsubscribe: () => void;
  readonly #running: Promise<void>;
  #publishing: Promise<void> = Promise.resolve();
  #lastWarnedAt = 0;
  #stopped: Promise<void> | undefined;

  private constructor(options: HiveLanesOptions) {
    this.#o = options;
    const { settings } = options;
    this.#participant = new Participant({
      client: options.client,
      lane: settings.lane,
      group: settings.group,
      concurrency: options.concurrency ?? 4,
      ...(options.waitMs === undefined ? {} : { waitMs: options.waitMs }),
      onError: (error) => this.#laneTrouble(error),
    });
    for (const project of settings.snapshotProjects) {
      this.#participant.handle(HIVE_SCHEMAS.snapshotRequest, project, (work, signal) => this.#answerSnapshot(work, signal));
    }
    this.#unsubscribe = options.hub.onModeChange((change) => this.#enqueueModeChange(change));
    this.#running = this.#participant.run();
  }

  /** Joins the lane: claims work of the group and publishes mode changes until `stop()`. */
  static start(options: HiveLanesOptions): HiveLanes {
    const lanes = new HiveLanes(options);
    options.log.info("the hive joined its lane as a participant", {
      lane: options.settings.lane,
      group: options.settings.group,
      snapshotProjects: options.settings.snapshotProjects.length,
    });
    return lanes;
  }

  /** The publishers whose snapshot requests have a handler (empty without HIVE_LANES_SNAPSHOT_PROJECTS). */
  get snapshotPublishers(): readonly string[] {
    return this.#o.settings.snapshotProjects;
  }

  /** Claim and settlement counters of the participant. */
  get stats(): Participant["stats"] {
    return this.#participant.stats;
  }

  /**
   * Stops claiming and publishing: running handlers and queued mode changes
   * get `graceMs` to finish; a mode change still unpublished then is logged
   * as not confirmed.
   */
  stop(graceMs = 5_000): Promise<void> {
    this.#stopped ??= (async () => {
      this.#unsubscribe();
      const deadline = new Promise<void>((resolve) => setTimeout(resolve, graceMs).unref());
      await Promise.race([this.#publishing, deadline]);
      this.#stopping.abort(new Error("the hive lane adapter is stopping"));
      await this.#participant.stop(graceMs);
      await this.#running;
      await this.#publishing;
    })();
    return this.#stopped;
  }

  async #answerSnapshot(work: ClaimedWork, signal: AbortSignal): Promise<void> {
    const fields = { requester: work.project, request: work.id, sequence: work.sequence.toString(), attempt: work.attempt };
    try {
      try {
        checkSnapshotRequest(work.payload);
      } catch {
        throw new SwarmError("swarm_invalid", "a hive governor snapshot request must contain {}");
      }
      const members = await this.#o.hub.listMembers();
      const migrations = await (this.#o.readMigrationMarks ?? noMigrationMarks)();
      const event = snapshotEvent({ project: work.project, id: work.id, sequence: work.sequence }, { members, migrations });
      const published = await this.#o.client.publish(
        { lane: this.#o.settings.lane, id: event.id, kind: RecordKind.EVENT, schema: HIVE_SCHEMAS.snapshot, payload: event.payload },
        { signal, timeoutMs: this.#o.publishTimeoutMs ?? 10_000 },
      );
      this.#o.log.info("hive governor snapshot published", { ...fields, event: event.id, duplicate: published.duplicate });
    } catch (error) {
      this.#o.log.warn("a hive governor snapshot request failed; it is nacked", { ...fields, ...safeErrorFields(error) });
      throw error;
    }
  }

  #enqueueModeChange(change: HubModeChange): void {
    const event = modeChangeEvent(change);
    this.#publishing = this.#publishing.then(() => this.#publishModeChange(change, event));
  }

  async #publishModeChange(change: HubModeChange, event: { id: string; payload: Uint8Array }): Promise<void> {
    const fields = { change: change.kind, event: event.id, ...(change.kind === "scope" ? {} : { member: change.memberId }) };
    const attempts = Math.max(1, this.#o.publishAttempts ?? 3);
    let failure: unknown;
    for (let attempt = 1; attempt <= attempts && !this.#stopping.signal.aborted; attempt++) {
      try {
        await this.#o.client.publish(
          { lane: this.#o.settings.lane, id: event.id, kind: RecordKind.EVENT, schema: HIVE_SCHEMAS.modeChange, payload: event.payload },
          { signal: this.#stopping.signal, timeoutMs: this.#o.publishTimeoutMs ?? 10_000 },
        );
        this.#o.log.info("hive governor mode change published", fields);
        return;
      } catch (error) {
        failure = error;
        if (attempt < attempts) await sleep(250 * 4 ** (attempt - 1), this.#stopping.signal);
      }
    }
    this.#o.log.warn("durable delivery of the hive governor mode change was not confirmed; the hub state change stands", {
      ...fields,
      ...(failure === undefined ? {} : safeErrorFields(failure)),
    });
  }

  /** The participant's own failures (an unreachable lane, a lost lease): a warning at most once a minute. */
  #laneTrouble(error: unknown): void {
    const now = Date.now();
    if (now - this.#lastWarnedAt >= 60_000) {
      this.#lastWarnedAt = now;
      this.#o.log.warn("the hive lane participant cannot reach its lane; it keeps trying", safeErrorFields(error));
    } else {
      this.#o.log.debug("the hive lane participant cannot reach its lane", safeErrorFields(error));
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}
