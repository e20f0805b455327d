import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  type GetRegistryResponse,
  GetRegistryResponseSchema,
  LaneAccessSchema,
  LaneBoundsSchema,
  LaneService,
} from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import type { LaneRegistry, RegistryView } from "../../lanes/index.js";
import { principalOf } from "../auth.js";
import { notBuilt } from "../not-built.js";

/**
 * LaneService: decode, authorize, call the lanes core, encode. The registry
 * is served from configuration; the JetStream operations arrive with the
 * lanes core and answer `unimplemented` until then. The service is served
 * even without a lanes configuration, so that callers get the documented
 * `unauthenticated` (no project token exists) rather than a bare 404.
 */
export function laneServiceImpl(registry: LaneRegistry | undefined): ServiceImpl<typeof LaneService> {
  // The registry is immutable for the life of the process: build each
  // project's answer once instead of on every call.
  const answers = new Map<string, GetRegistryResponse>();
  return {
    getRegistry(_req, ctx) {
      const { project } = principalOf(ctx, "project");
      // Without a lanes configuration no project token exists, so the
      // request gate refuses every caller before this point.
      if (registry === undefined) throw notBuilt("lanes", "GetRegistry (this server has no lanes configuration)");
      let answer = answers.get(project);
      if (answer === undefined) {
        answer = registryResponse(registry.viewFor(project));
        answers.set(project, answer);
      }
      return answer;
    },
    publish() {
      throw notBuilt("lanes", "Publish (durable lane publishing)");
    },
    replay() {
      throw notBuilt("lanes", "Replay (event replay with cursors)");
    },
    async *follow() {
      throw notBuilt("lanes", "Follow (tailing a lane)");
    },
    claim() {
      throw notBuilt("lanes", "Claim (work groups with fenced leases)");
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
    }),
  });
}
