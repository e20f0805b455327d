/**
 * `npm run bench [name...]`: runs Laneway's benchmarks, each printing
 * figures and ratios against a baseline measured in the same run.
 */
import { callSignalBench } from "./call-signal.js";
import { kmapLane } from "./kmap-lane.js";
import { lanesPublish } from "./lanes-publish.js";
import { lanesScale } from "./lanes-scale.js";
import { lanesWork } from "./lanes-work.js";
import { serverOverhead } from "./server-overhead.js";
import { swarmBus } from "./swarm-bus.js";
import { swarmMint } from "./swarm-mint.js";

const benchmarks: Record<string, () => Promise<void>> = {
  "server-overhead": serverOverhead,
  "kmap-lane": kmapLane,
  "lanes-publish": lanesPublish,
  "lanes-work": lanesWork,
  "lanes-scale": lanesScale,
  "swarm-mint": swarmMint,
  "swarm-bus": swarmBus,
  "call-signal": callSignalBench,
};

const selected = process.argv.slice(2);
for (const name of selected.length > 0 ? selected : Object.keys(benchmarks)) {
  const benchmark = benchmarks[name];
  if (!benchmark) {
    console.error(`unknown benchmark ${name}; known: ${Object.keys(benchmarks).join(", ")}`);
    process.exit(2);
  }
  await benchmark();
}
