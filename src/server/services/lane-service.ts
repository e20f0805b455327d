import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampFromMs, type Duration } from "@bufbuild/protobuf/wkt";
import { Code, type ServiceImpl } from "@connectrpc/connect";
import {
  type GetRegistryResponse,
  GetRegistryResponseSchema,
  LaneAccessSchema,
  LaneBoundsSchema,
  LaneRecordSchema,
  LaneService,
  PublishResponseSchema,
  PublishResultSchema,
  ReceiptErrorSchema,
  RecordErrorSchema,
  WorkSchema,
  DeliveryState,
  RecordKind,
  type LaneRecord as LaneRecordMessage,
  type PublishResult,
} from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import {
  LaneError,
  type Acked,
  type LaneRecord,
  type InspectedState,
  type LanesCore,
  type PublishOutcome,
  type Receipt,
  type ReceiptOutcome,
  type RecordKind as CoreRecordKind,
  type RecoveryResult,
  type RegistryView,
  type WorkDelivery,
} from "../../lanes/index.js";
import { safeErrorFields, type Logger } from "../../log/logger.js";
import { principalOf } from "../auth.js";
import type { ErrorDomainSpec } from "../core-binding.js";
import { codeOfReason } from "../error-mapping.js";
import { notEnabled } from "../not-enabled.js";
import { callSignal } from "./call-signal.js";
import { binaryCodec, followResponse, replayResponse } from "./lane-pages.js";

/**
 * LaneService: decode, authorize, call the lanes core, encode. The service
 * is served even without a lanes configuration, so that callers get the
 * documented `unauthenticated` (no project token exists) rather than a bare
 * 404.
 */

const kinds: Record<CoreRecordKind, RecordKind> = { event: RecordKind.EVENT, work: RecordKind.WORK };

function coreKind(kind: RecordKind): CoreRecordKind {
  // The contract's rules refuse UNSPECIFIED and unknown values before this.
  return kind === RecordKind.WORK ? "work" : "event";
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

export function laneServiceImpl(core: LanesCore | undefined, drain: AbortSignal, log: Logger, errors: ErrorDomainSpec): ServiceImpl<typeof LaneService> {
  // Without a lanes configuration no project token exists, so the request
  // gate refuses every caller before any of these runs.
  const lanes = (): LanesCore => {
    if (core === undefined) throw notEnabled("lanes", "LaneService", "start laneway serve with --lanes-config");
    return core;
  };
  // The registry is immutable for the life of the process: build each
  // project's answer once instead of on every call.
  const answers = new Map<string, GetRegistryResponse>();

  /** One record's failure in a batch, as Publish would have answered it. */
  const recordError = (error: unknown): PublishResult => {
    if (error instanceof LaneError) {
      const code = codeOfReason(errors, error.reason);
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
      const { id: project } = principalOf(ctx, "project");
      let answer = answers.get(project);
      if (answer === undefined) {
        answer = registryResponse(lanes().registry.viewFor(project));
        answers.set(project, answer);
      }
      return answer;
    },
    async publish(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      const outcome = await lanes().publish(
        { project, lane: req.lane, publication: { id: req.id, kind: coreKind(req.kind), schema: req.schema, payload: req.payload, provenance: req.provenance } },
        callSignal(ctx),
      );
      return publishResponse(outcome);
    },
    async publishBatch(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      const outcomes = await lanes().publishBatch(
        { project, lane: req.lane, publications: req.records.map((r) => ({ id: r.id, kind: coreKind(r.kind), schema: r.schema, payload: r.payload, provenance: r.provenance })) },
        callSignal(ctx),
      );
      return {
        results: outcomes.map((outcome) =>
          "published" in outcome ? create(PublishResultSchema, { outcome: { case: "published", value: publishResponse(outcome.published) } }) : recordError(outcome.error),
        ),
      };
    },
    async replay(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      const page = await lanes().replay({ project, lane: req.lane, cursor: req.cursor, maxEvents: req.maxEvents }, callSignal(ctx));
      return replayResponse(page, binaryCodec(ctx), laneRecordMessage);
    },
    async *follow(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      // Ends cleanly on client cancellation and when the server drains.
      const binary = binaryCodec(ctx);
      for await (const page of lanes().follow({ project, lane: req.lane, cursor: req.cursor }, callSignal(ctx, drain))) {
        yield followResponse(page, binary, laneRecordMessage);
      }
    },
    async claim(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      const [work] = await lanes().claim({ project, lane: req.lane, group: req.group, max: 1, waitMs: waitMs(req.wait) }, callSignal(ctx, drain));
      return work === undefined ? {} : { work: workMessage(work) };
    },
    async claimBatch(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      if (req.acks.length > 0) {
        // Acknowledgements first, then the claim, in one write of the group's state; no waiting.
        const outcome = await lanes().ackAndClaim({ project, lane: req.lane, group: req.group, acks: req.acks.map(receiptOf), max: req.maxRecords }, callSignal(ctx));
        return { work: outcome.work.map(workMessage), ackResults: outcome.acks.map((o) => ackResult(errors, o)) };
      }
      const work = await lanes().claim({ project, lane: req.lane, group: req.group, max: req.maxRecords, waitMs: waitMs(req.wait) }, callSignal(ctx, drain));
      return { work: work.map(workMessage) };
    },
    async renew(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      const [outcome] = await lanes().renew({ project, lane: req.lane, group: req.group, receipts: [receiptOf(req)] }, callSignal(ctx));
      return { leaseExpiresAt: timestampFromMs(okOf(outcome!).leaseExpiresAt) };
    },
    async renewBatch(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      const outcomes = await lanes().renew({ project, lane: req.lane, group: req.group, receipts: req.receipts.map(receiptOf) }, callSignal(ctx));
      return {
        results: outcomes.map((o) =>
          "ok" in o ? { outcome: { case: "renewed" as const, value: { leaseExpiresAt: timestampFromMs(o.ok.leaseExpiresAt) } } } : { outcome: { case: "error" as const, value: receiptError(errors, o.error) } },
        ),
      };
    },
    async ack(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      const [outcome] = await lanes().ack({ project, lane: req.lane, group: req.group, receipts: [receiptOf(req)] }, callSignal(ctx));
      const acked = okOf(outcome!);
      return { ackedAt: timestampFromMs(acked.ackedAt), duplicate: acked.duplicate };
    },
    async ackBatch(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      const outcomes = await lanes().ack({ project, lane: req.lane, group: req.group, receipts: req.receipts.map(receiptOf) }, callSignal(ctx));
      return { results: outcomes.map((o) => ackResult(errors, o)) };
    },
    async nack(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      const [outcome] = await lanes().nack({ project, lane: req.lane, group: req.group, receipts: [receiptOf(req)] }, callSignal(ctx));
      const nacked = okOf(outcome!);
      return { retryAt: timestampFromMs(nacked.retryAt), attempt: nacked.attempt };
    },
    async nackBatch(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      const outcomes = await lanes().nack({ project, lane: req.lane, group: req.group, receipts: req.receipts.map(receiptOf) }, callSignal(ctx));
      return {
        results: outcomes.map((o) =>
          "ok" in o
            ? { outcome: { case: "nacked" as const, value: { retryAt: timestampFromMs(o.ok.retryAt), attempt: o.ok.attempt } } }
            : { outcome: { case: "error" as const, value: receiptError(errors, o.error) } },
        ),
      };
    },
    async inspectGroup(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      const g = await lanes().inspect({ project, lane: req.lane, group: req.group }, callSignal(ctx));
      return {
        group: {
          lane: g.lane,
          group: g.group,
          revision: BigInt(g.revision),
          cursor: BigInt(g.cursor),
          firstRetained: BigInt(g.firstRetained),
          lastSequence: BigInt(g.lastSequence),
          missingThrough: BigInt(g.missingThrough),
          slots: g.slots,
          maxLedger: g.maxLedger,
          liveLeases: g.liveLeases,
          recoveries: g.recoveries,
          recoveryHistory: g.recoveryHistory.map(recoveryResultMessage),
          deliveries: g.deliveries.map((d) => ({
            sequence: BigInt(d.sequence),
            project: d.project,
            attempt: d.attempt,
            state: deliveryStates[d.state],
            ...(d.leaseExpiresAt !== undefined ? { leaseExpiresAt: timestampFromMs(d.leaseExpiresAt) } : {}),
            ...(d.retryAt !== undefined ? { retryAt: timestampFromMs(d.retryAt) } : {}),
            retained: d.retained,
          })),
          completions: g.completions.map((b) => ({
            firstAckedAt: timestampFromMs(b.firstAckedAt),
            lastAckedAt: timestampFromMs(b.lastAckedAt),
            completed: BigInt(b.completed),
            ranges: b.ranges.map((r) => ({ first: BigInt(r.first), last: BigInt(r.last) })),
            retried: b.retried.map((r) => ({ sequence: BigInt(r.sequence), attempt: r.attempt })),
          })),
          historyBytes: g.historyBytes,
          historyBudget: g.historyBudget,
        },
      };
    },
    async recoverGroup(req, ctx) {
      const { id: project } = principalOf(ctx, "project");
      const result = await lanes().recover(
        {
          project,
          lane: req.lane,
          group: req.group,
          id: req.id,
          revision: req.revision,
          cursorThrough: req.cursorThrough,
          expired: req.expired.map((e) => ({ sequence: e.sequence, receipt: e.receipt })),
          missing: req.missing,
        },
        callSignal(ctx),
      );
      return { result: recoveryResultMessage(result) };
    },
  };
}

function recoveryResultMessage(result: RecoveryResult) {
  return {
    id: result.id,
    project: result.project,
    cursorThrough: BigInt(result.cursorThrough),
    missingThrough: BigInt(result.missingThrough),
    expirations: result.expirations.map((x) => ({ project: x.project, sequence: BigInt(x.sequence), attempt: x.attempt })),
    revision: BigInt(result.revision),
    recordedAt: timestampFromMs(result.recordedAt),
  };
}

const deliveryStates: Record<InspectedState, DeliveryState> = {
  leased: DeliveryState.LEASED,
  retry_scheduled: DeliveryState.RETRY_SCHEDULED,
  released: DeliveryState.RELEASED,
};

function waitMs(wait: Duration | undefined): number {
  return wait === undefined ? 0 : Number(wait.seconds) * 1_000 + Math.floor(wait.nanos / 1_000_000);
}

function receiptOf(item: { sequence: bigint; receipt: string }): Receipt {
  return { sequence: item.sequence, receipt: item.receipt };
}

function workMessage(work: WorkDelivery) {
  return create(WorkSchema, {
    record: laneRecordMessage(work.record),
    receipt: work.receipt,
    attempt: work.attempt,
    leaseExpiresAt: timestampFromMs(work.leaseExpiresAt),
  });
}

/** The single-receipt RPCs answer a receipt's own failure as the call's error. */
function okOf<T>(outcome: { ok: T } | { error: unknown }): T {
  if ("ok" in outcome) return outcome.ok;
  throw outcome.error;
}

/** One acknowledgement's result in a batch: its completion, or its own error. */
function ackResult(errors: ErrorDomainSpec, outcome: ReceiptOutcome<Acked>) {
  return "ok" in outcome
    ? { outcome: { case: "acked" as const, value: { ackedAt: timestampFromMs(outcome.ok.ackedAt), duplicate: outcome.ok.duplicate } } }
    : { outcome: { case: "error" as const, value: receiptError(errors, outcome.error) } };
}

/** One receipt's failure in a batch, as the single call would have answered it (never the receipt). */
function receiptError(errors: ErrorDomainSpec, error: unknown) {
  if (error instanceof LaneError) return create(ReceiptErrorSchema, { code: codeName(codeOfReason(errors, error.reason)), reason: error.reason, message: error.message });
  return create(ReceiptErrorSchema, { code: "internal", reason: "internal", message: "internal error" });
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
