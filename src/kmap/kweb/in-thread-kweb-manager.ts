import type { ApplyOutcome, ApplyRequest, GroupApply, KwebManager } from "../kweb-manager.js";
import type { KwebWriter } from "./kweb-writer.js";

/**
 * The KwebManager interface over a KwebWriter on the calling thread.
 *
 * The Kweb worker thread uses it to run the command lane's runtime next to
 * the writer it owns: the runtime's apply is then a direct call (one signed
 * SQLite transaction, synchronous) instead of a message round trip, and the
 * one CommandRuntime implementation serves both this in-thread case and a
 * library user's own manager. Never use it on the server's event loop: an
 * apply can wait for a lock and always waits for an fsync.
 *
 * It also offers group apply (KwebWriter.applyGroup): the runtime hands it
 * a run of queued commands, each committed in its own Kweb transaction,
 * and one fsync makes them all durable.
 */
export class InThreadKwebManager implements KwebManager {
  /** Group apply: the writer runs on this thread, synchronously, as the runtime's group needs. */
  readonly groupApply: GroupApply;

  constructor(private readonly writer: KwebWriter) {
    this.groupApply = { apply: (requests, options) => writer.applyGroup(requests, options) };
  }

  ready(): Promise<void> {
    return Promise.resolve();
  }

  apply(request: ApplyRequest): Promise<ApplyOutcome> {
    try {
      return Promise.resolve(this.writer.apply(request));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** The worker closes the writer itself. */
  close(): Promise<void> {
    return Promise.resolve();
  }
}
