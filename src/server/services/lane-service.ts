import { setMaxListeners } from "node:events";
import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  type GetRegistryResponse,
  GetRegistryResponseSchema,
  LaneAccessSchema,
  LaneBoundsSchema,
  LaneRecordSchema,
  LaneService,
  PublishResponseSchema,
  PublishResultSchema,
  RecordErrorSchema,
  RecordKind,
  type LaneRecord as LaneRecordMessage,
  type PublishResult,
} from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { LaneError, type LaneRecord, type LanesCore, type PublishOutcome, type RecordKind as CoreRecordKind, type RegistryView } from "../../lanes/index.js";
import { safeErrorFields, type Logger } from "../../log/logger.js";
import { principalOf } from "../auth.js";
import { codeOfReason } from "../error-mapping.js";
import { notBuilt } from "../not-built.js";

/**
 * LaneService: decode, authorize, call the lanes core, encode. Work groups
 * (claims, acks, recovery) arrive with the next part of the lanes core and
 * answer `unimplemented` until then. The service is served even without a
 * lanes configuration, so that callers get the documented `unauthenticated`
 * (no project token exists) rather than a bare 404.
 */

const kinds: Record<CoreRecordKind, RecordKind> = { event: RecordKind.EVENT, work: RecordKind.WORK };

function coreKind(kind: RecordKind): CoreRecordKind {
  // The contract's rules refuse UNSPECIFIED and unknown values before this.
  return kind === RecordKind.WORK ? "work" : "event";
}

/**
 * The call's signal as the core understands it: aborted with a
 * `TimeoutError` when the call's deadline passed, with an `AbortError` when
 * the client went away or the server is shutting down.
 */
export function coreSignal(ctx: HandlerContext, ...others: AbortSignal[]): AbortSignal {
  const controller = new AbortController();
  // A batch waits on up to 128 records at once, each adding its own abort
  // listener for the length of one broker operation: not a leak.
  setMaxListeners(0, controller.signal);
  const signals = [ctx.signal, ...others];
  const onAbort = (source: AbortSignal) => {
    const reason = source.reason;
    const deadline = reason instanceof ConnectError && reason.code === Code.DeadlineExceeded;
    controller.abort(new DOMException(deadline ? "the deadline passed" : "the call was canceled", deadline ? "TimeoutError" : "AbortError"));
  };
  for (const signal of signals) {
    if (signal.aborted) {
      onAbort(signal);
      break;
    }
    signal.addEventListener("abort", () => onAbort(signal), { once: true, signal: controller.signal });
  }
  return controller.signal;
}

export function laneRecordMessage(record: LaneRecord): LaneRecordMessage {
  return create(LaneRecordSchema, {
    sequence: BigInt(record.sequence),
    lane: record.lane,
    project: record.project,
    id: record.id,
    kind: kinds[record.kind],
    schema: record.schema,
    payload: record.payload,
    provenance: record.provenance,
    createdAt: timestampFromMs(record.createdAt),
  });
}

function publishResponse(outcome: PublishOutcome) {
  return create(PublishResponseSchema, { record: laneRecordMessage(outcome.record), duplicate: outcome.duplicate });
}

export function laneServiceImpl(core: LanesCore | undefined, drain: AbortSignal, log: Logger): ServiceImpl<typeof LaneService> {
  // Without a lanes configuration no project token exists, so the request
  // gate refuses every caller before any of these runs.
  const lanes = (): LanesCore => {
    if (core === undefined) throw notBuilt("lanes", "LaneService (this server has no lanes configuration)");
    return core;
  };
  // The registry is immutable for the life of the process: build each
  // project's answer once instead of on every call.
  const answers = new Map<string, GetRegistryResponse>();

  /** One record's failure in a batch, as Publish would have answered it. */
  const recordError = (error: unknown): PublishResult => {
    if (error instanceof LaneError) {
      const code = codeOfReason(error.reason);
      return create(PublishResultSchema, {
        outcome: { case: "error", value: create(RecordErrorSchema, { code: codeName(code), reason: error.reason, message: error.message }) },
      });
    }
    log.error("unexpected failure publishing a record of a batch", safeErrorFields(error));
    return create(PublishResultSchema, {
      outcome: { case: "error", value: create(RecordErrorSchema, { code: "internal", reason: "internal", message: "internal error" }) },
    });
  };

  return {
    getRegistry(_req, ctx) {
      const { project } = principalOf(ctx, "project");
      let answer = answers.get(project);
      if (answer === undefined) {
        answer = registryResponse(lanes().registry.viewFor(project));
        answers.set(project, answer);
      }
      return answer;
    },
    async publish(req, ctx) {
      const { project } = principalOf(ctx, "project");
      const outcome = await lanes().publish(
        project,
        req.lane,
        { id: req.id, kind: coreKind(req.kind), schema: req.schema, payload: req.payload, provenance: req.provenance },
        coreSignal(ctx),
      );
      return publishResponse(outcome);
    },
    async publishBatch(req, ctx) {
      const { project } = principalOf(ctx, "project");
      const outcomes = await lanes().publishBatch(
        project,
        req.lane,
        req.records.map((r) => ({ id: r.id, kind: coreKind(r.kind), schema: r.schema, payload: r.payload, provenance: r.provenance })),
        coreSignal(ctx),
      );
      return {
        results: outcomes.map((outcome) =>
          "published" in outcome ? create(PublishResultSchema, { outcome: { case: "published", value: publishResponse(outcome.published) } }) : recordError(outcome.error),
        ),
      };
    },
    async replay(req, ctx) {
      const { project } = principalOf(ctx, "project");
      const page = await lanes().replay(project, req.lane, safeNumber(req.cursor), req.maxEvents, coreSignal(ctx));
      return {
        events: page.events.map(laneRecordMessage),
        cursor: BigInt(page.cursor),
        firstRetained: BigInt(page.firstRetained),
        lastSequence: BigInt(page.lastSequence),
      };
    },
    async *follow(req, ctx) {
      const { project } = principalOf(ctx, "project");
      // Ends cleanly on client cancellation and when the server drains.
      for await (const page of lanes().follow(project, req.lane, safeNumber(req.cursor), coreSignal(ctx, drain))) {
        yield { events: page.events.map(laneRecordMessage), cursor: BigInt(page.cursor) };
      }
    },
    claim() {
      throw notBuilt("lanes", "Claim (work groups with fenced leases)");
    },
    claimBatch() {
      throw notBuilt("lanes", "ClaimBatch (work groups with fenced leases)");
    },
    renewBatch() {
      throw notBuilt("lanes", "RenewBatch (work leases)");
    },
    ackBatch() {
      throw notBuilt("lanes", "AckBatch (work completion)");
    },
    nackBatch() {
      throw notBuilt("lanes", "NackBatch (work retry)");
    },
    renew() {
      throw notBuilt("lanes", "Renew (work leases)");
    },
    ack() {
      throw notBuilt("lanes", "Ack (work completion)");
    },
    nack() {
      throw notBuilt("lanes", "Nack (work retry)");
    },
    inspectGroup() {
      throw notBuilt("lanes", "InspectGroup (group ledgers)");
    },
    recoverGroup() {
      throw notBuilt("lanes", "RecoverGroup (explicit gap recovery)");
    },
  };
}

/** A cursor beyond 2^53 cannot be a stream sequence: the core reports it as beyond the end. */
function safeNumber(value: bigint): number {
  return value > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(value);
}

function codeName(code: Code): string {
  return Code[code]!.replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}

function registryResponse(view: RegistryView): GetRegistryResponse {
  const b = view.bounds;
  return create(GetRegistryResponseSchema, {
    project: view.project,
    namespace: view.namespace,
    lanes: view.lanes.map((lane) =>
      create(LaneAccessSchema, {
        lane: lane.lane,
        owner: lane.owner,
        publish: lane.publish,
        subscribe: lane.subscribe,
        groups: [...lane.groups],
        recoverGroups: [...lane.recoverGroups],
      }),
    ),
    bounds: create(LaneBoundsSchema, {
      lease: durationFromMs(b.leaseMs),
      maxPending: b.maxPending,
      maxLedger: b.maxLedger,
      retryDelay: durationFromMs(b.retryDelayMs),
      maxRetryDelay: durationFromMs(b.maxRetryDelayMs),
      ackRetention: durationFromMs(b.ackRetentionMs),
      retention: durationFromMs(b.retentionMs),
      maxPayload: BigInt(b.maxPayload),
      operationTimeout: durationFromMs(b.operationTimeoutMs),
      duplicateWindow: durationFromMs(b.duplicateWindowMs),
      maxRecords: BigInt(b.maxRecords),
      maxBytes: BigInt(b.maxBytes),
      ledgerBytes: BigInt(b.ledgerBytes),
    }),
  });
}
