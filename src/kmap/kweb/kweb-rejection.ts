import type { RejectionCode } from "../kweb-manager.js";

/**
 * A command that cannot apply to the current graph. Thrown inside the
 * writer's SQLite transaction so that everything the command did so far is
 * rolled back, then turned into a `rejected` ApplyOutcome: rejections are
 * answers, not failures of the Kweb.
 */
export class KwebRejection extends Error {
  override readonly name = "KwebRejection";

  constructor(
    readonly code: RejectionCode,
    message: string,
  ) {
    super(message);
  }
}

/** The rejection for a node that does not exist. */
export function missingNode(id: string, role = "node"): KwebRejection {
  return new KwebRejection("missing_node", `${role} ${id} does not exist`);
}
