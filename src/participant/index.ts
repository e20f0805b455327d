/**
 * The lanes participant: a worker library for one group of one lane, built
 * on the generated client (the specification's `laneparticipant`). Import it
 * as `laneway/participant`.
 */
export { Participant, type ParticipantOptions, type WorkHandler, type ClaimedWork, type ParticipantStats } from "./participant.js";
