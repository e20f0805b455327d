/**
 * A hub process for the migration crash tests: opens the hub's bus
 * (scoped, provisioning) and runs one migration with the pause point
 * `pauseAt` enabled, where it prints `laneway-paused <point> <id>` and
 * stops itself (the test then kills it with SIGKILL). Prints `done
 * <result>` if it ever finishes.
 *
 * Usage (argv[2] is JSON): {url, credentials, kind: "state"|"queue"|"dead", swarm, name?, bucket?, keys?, pauseAt}
 */
import { pausePointsFromSetting } from "../../../src/fault-injection/pause-points.js";
import { openBus } from "../../../src/swarm-bus/index.js";
import { MIGRATION_PAUSE_POINTS } from "../../../src/swarm-bus/internal.js";

interface Spec {
  url: string;
  credentials: string;
  kind: "state" | "queue" | "dead";
  swarm: string;
  name?: string;
  bucket?: string;
  keys?: string[];
  pauseAt: string;
}

const spec = JSON.parse(process.argv[2]!) as Spec;
const bus = await openBus({ backend: "nats", url: spec.url, credentials: spec.credentials, scoped: true, bind: false });
const options = { pausePoints: pausePointsFromSetting(spec.pauseAt, MIGRATION_PAUSE_POINTS) };
const result =
  spec.kind === "state"
    ? await bus.migrateState({ swarm: spec.swarm, bucket: spec.bucket!, keys: spec.keys!, ...options })
    : spec.kind === "queue"
      ? await bus.migrateQueue({ swarm: spec.swarm, name: spec.name!, ...options })
      : await bus.migrateDead({ swarm: spec.swarm, ...options });
process.stdout.write(`done ${JSON.stringify(result)}\n`);
await bus.close();
