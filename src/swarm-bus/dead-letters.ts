/**
 * Dead letters: events a reader gave up on, kept per swarm.
 *
 * A scoped bus writes a swarm's letters to `swarm.<swarm>.dead.event` in
 * the swarm's dead-letter stream (the logical name is `dead.<swarm>`); an
 * unscoped bus writes them to `dead.<swarm>` in the legacy global stream
 * (`AGENTIHOOKS_DEAD` while present, else `AGENTIHOOKS-DEAD`). Readers page
 * through them by sequence, like events.
 */
import { headers as natsHeaders, type MsgHdrs } from "@nats-io/transport-node";
import { swarmSubjectPrefix } from "./stream-names.js";
import { BUS_HEADERS, legacyDeadSubject } from "./names.js";
import type { BusEvent, BusMode } from "./subject-map.js";

export interface DeadLetterOptions {
  /** Why the event was dead-lettered (stored as the `Agentihooks-Dead-Reason` header). */
  readonly reason?: string;
}

/** A dead letter: the event and why. */
export interface DeadLetterParams extends DeadLetterOptions {
  /**
   * The event given up on, a JSON object. A root bus takes the swarm from
   * its `swarm` field (refused without one); a swarm's bus requires it to
   * name that swarm when it names one (scoped mode).
   */
  readonly event: BusEvent;
}

/** The logical subject of a swarm's dead letters. */
export function deadLetterName(swarm: string): string {
  return legacyDeadSubject(swarm);
}

/** What a reader of a swarm's dead letters filters on. */
export function deadLetterFilters(mode: BusMode, swarm: string): readonly string[] {
  return mode === "scoped" ? [`${swarmSubjectPrefix(swarm)}.dead.>`] : [legacyDeadSubject(swarm)];
}

/** The headers of a dead letter (undefined when there is nothing to say). */
export function deadLetterHeaders(options: DeadLetterOptions): MsgHdrs | undefined {
  if (options.reason === undefined || options.reason === "") return undefined;
  const h = natsHeaders();
  // Header values are one line.
  h.set(BUS_HEADERS.deadReason, options.reason.replace(/[\r\n]+/g, " ").slice(0, 1_024));
  return h;
}
