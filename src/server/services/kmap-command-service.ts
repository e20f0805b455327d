import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  CommandErrorSchema,
  CommandRecordSchema,
  CommandState as ProtoCommandState,
  SubmissionSchema,
  type CommandRecord as ProtoCommandRecord,
} from "../../../gen/laneway/kmap/v1/command_pb.js";
import {
  CommandEventKind as ProtoEventKind,
  CommandLaneStatusSchema,
  KmapCommandService,
  WatchCommandsResponseSchema,
  WatchPositionPrunedSchema,
} from "../../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import {
  KmapError,
  PositionPrunedError,
  retryWhileBusy,
  type CommandEvent,
  type CommandEventKind,
  type CommandQueue,
  type CommandRecord,
  type CommandState,
} from "../../kmap/index.js";
import type { ErrorDomainSpec } from "../core-binding.js";
import { domainError } from "../error-mapping.js";
import { decodePageToken, encodePageToken, pageSize } from "../paging.js";
import { callSignal } from "./call-signal.js";

/**
 * KmapCommandService: decode, call the command lane, encode. The lane is
 * the only status store; listing pages through its table by submission
 * sequence and watching reads its change log. Reads never wait on the event
 * loop: a read that meets a lock another process holds is retried
 * asynchronously (retryWhileBusy), delaying only its own call.
 */

const states: Record<CommandState, ProtoCommandState> = {
  queued: ProtoCommandState.QUEUED,
  applying: ProtoCommandState.APPLYING,
  committed: ProtoCommandState.COMMITTED,
  failed: ProtoCommandState.FAILED,
};

const coreStates = new Map<ProtoCommandState, CommandState>(Object.entries(states).map(([core, proto]) => [proto, core as CommandState]));

const eventKinds: Record<CommandEventKind, ProtoEventKind> = {
  queued: ProtoEventKind.QUEUED,
  applying: ProtoEventKind.APPLYING,
  retry_scheduled: ProtoEventKind.RETRY_SCHEDULED,
  committed: ProtoEventKind.COMMITTED,
  failed: ProtoEventKind.FAILED,
  recovered: ProtoEventKind.RECOVERED,
};

export function commandRecordMessage(record: CommandRecord): ProtoCommandRecord {
  return create(CommandRecordSchema, {
    sequence: BigInt(record.sequence),
    submission: create(SubmissionSchema, {
      idempotencyId: record.submission.idempotencyId,
      command: record.submission.command,
      expectedTransactionIds: { ...record.submission.expectedTransactionIds },
    }),
    state: states[record.state],
    submittedAt: timestampFromMs(record.submittedAt),
    attempts: record.attempts,
    ...(record.nextAttemptAt !== undefined ? { nextAttemptAt: timestampFromMs(record.nextAttemptAt) } : {}),
    transactionId: record.transactionId ?? "",
    createdNodeId: record.createdNodeId ?? "",
    ...(record.error ? { error: create(CommandErrorSchema, record.error) } : {}),
    updatedAt: timestampFromMs(record.updatedAt),
  });
}

export function kmapCommandServiceImpl(lane: CommandQueue, drain: AbortSignal, errors: ErrorDomainSpec): ServiceImpl<typeof KmapCommandService> {
  return {
    async submitCommand(req) {
      // The contract makes `command` required; the interceptor has checked it.
      const result = await lane.submit({
        idempotencyId: req.idempotencyId,
        command: req.command!,
        expectedTransactionIds: req.expectedTransactionIds,
      });
      return { record: commandRecordMessage(result.record), existing: result.existing, position: BigInt(result.position) };
    },

    async getCommand(req, ctx) {
      const record = await retryWhileBusy(() => lane.get({ idempotencyId: req.idempotencyId }), { signal: callSignal(ctx) });
      if (!record) throw new KmapError("not_found", `no command with idempotency_id ${req.idempotencyId}`);
      return { record: commandRecordMessage(record) };
    },

    async listCommands(req, ctx) {
      const size = pageSize(req.pageSize);
      const after = decodePageToken(req.pageToken);
      const state = req.state === ProtoCommandState.UNSPECIFIED ? undefined : coreStates.get(req.state);
      const records = await retryWhileBusy(() => lane.page({ afterSequence: after, limit: size + 1, state }), { signal: callSignal(ctx) });
      const page = records.slice(0, size);
      const last = page.at(-1);
      const status = lane.status();
      return {
        records: page.map(commandRecordMessage),
        nextPageToken: records.length > size && last ? encodePageToken(last.sequence) : "",
        status: create(CommandLaneStatusSchema, {
          pendingCommands: BigInt(status.pending),
          maxPendingCommands: BigInt(status.maxPending),
          oldestPosition: BigInt(status.oldestPosition),
          latestPosition: BigInt(status.latestPosition),
        }),
      };
    },

    async *watchCommands(req, ctx) {
      // Ends cleanly on client cancellation and when the server drains.
      const signal = callSignal(ctx, drain);
      const events = lane.watch({ afterPosition: Number(req.afterPosition), idempotencyId: req.idempotencyId || undefined }, signal);
      for (;;) {
        let next: IteratorResult<CommandEvent>;
        try {
          next = await events.next();
        } catch (error) {
          if (error instanceof PositionPrunedError) throw prunedError(errors, error);
          throw error;
        }
        if (next.done) return;
        try {
          yield watchMessage(next.value);
        } catch {
          // Only the transport throws into a yield: the answer could not be
          // written because the client went away (a reset, a broken pipe).
          // That is how a watch ordinarily ends, not a failure.
          await events.return(undefined);
          return;
        }
      }
    },
  };
}

function watchMessage(event: CommandEvent) {
  return create(WatchCommandsResponseSchema, {
    position: BigInt(event.position),
    kind: eventKinds[event.kind],
    record: commandRecordMessage(event.record),
    changedAt: timestampFromMs(event.changedAt),
  });
}

/** `position_pruned` with a detail a client can act on without parsing the message. */
function prunedError(errors: ErrorDomainSpec, error: PositionPrunedError) {
  const connectError = domainError(errors, "position_pruned", error.message);
  connectError.details.push({
    desc: WatchPositionPrunedSchema,
    value: {
      requestedAfterPosition: BigInt(error.requestedPosition),
      oldestPosition: BigInt(error.oldestPosition),
      resumeAfterPosition: BigInt(error.resumeAfterPosition),
    },
  });
  return connectError;
}
