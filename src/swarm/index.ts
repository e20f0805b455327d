/**
 * Swarm membership: the public surface of the swarm core. This version
 * provides its error vocabulary; credential minting, the scoped bus and
 * migration answer `unimplemented` in the server.
 */
export { SwarmError, type SwarmReason } from "./errors.js";
