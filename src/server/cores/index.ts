import type { CoreSettings } from "../../startup/index.js";
import type { CoreBinding } from "../core-binding.js";
import { kmapBinding } from "./kmap.js";
import { lanesBinding } from "./lanes.js";
import { swarmBinding } from "./swarm.js";

/**
 * Every core the server serves, in the order they are opened, registered
 * and advertised (and closed in reverse). Adding a core: its folder under
 * src/, its binding in this folder, and one entry here.
 */
export const coreBindings: readonly CoreBinding[] = [lanesBinding, swarmBinding, kmapBinding];

/** Every core's settings, for `loadStartupConfig` and `serve --help`. */
export const coreSettings: readonly CoreSettings[] = coreBindings.flatMap((b) => (b.settings ? [b.settings] : []));
