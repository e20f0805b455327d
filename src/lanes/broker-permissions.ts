import { groupBucket, laneSubjects, metaBucket, reservationBucket } from "./names.js";

/**
 * The NATS permissions Laneway's own credential needs for one lanes
 * namespace on a server it does not run (`--nats-url`): what docs/operations.md
 * lists, and what the suite grants a test server's user — nothing more —
 * to prove the list is complete. Participants never get any of these.
 */
export function lanesBrokerPermissions(namespace: string): { publish: string[]; subscribe: string[] } {
  const buckets = [metaBucket(namespace), reservationBucket(namespace), groupBucket(namespace)];
  return {
    publish: [
      // The JetStream API: account check, streams and buckets (info, create), reads.
      "$JS.API.INFO",
      "$JS.API.STREAM.INFO.*",
      "$JS.API.STREAM.CREATE.*",
      "$JS.API.STREAM.MSG.GET.*",
      "$JS.API.DIRECT.GET.>",
      "$JS.API.CONSUMER.CREATE.>",
      "$JS.API.CONSUMER.DELETE.>",
      "$JS.API.CONSUMER.MSG.NEXT.>",
      // The namespace's KV buckets (the generation, reservations, group ledgers).
      ...buckets.map((bucket) => `$KV.${bucket}.>`),
      // Records of every lane of the namespace.
      `laneway.${namespace}.>`,
    ],
    subscribe: [
      // Replies to the requests above.
      "_INBOX.>",
      // Lane watchers (followers and waiting claimers).
      laneSubjects(namespace, "*").replace(".*.rec.>", ".>"),
    ],
  };
}
