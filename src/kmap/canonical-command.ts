import { fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { CommandSchema, type Command } from "../../gen/laneway/kmap/v1/command_pb.js";
import { canonicalJson, type Json } from "../encoding/canonical-json.js";

/**
 * The canonical text of a typed Kmap command: its Protobuf JSON form with
 * the proto field names (`create_node`, `parent_id`, …), defaults omitted,
 * and keys sorted. Equal commands have equal text, so the lane compares
 * resubmissions by it and the Kweb signs it.
 */
export function canonicalCommand(command: Command): string {
  return canonicalJson(toJson(CommandSchema, command, { useProtoFieldName: true }) as Json);
}

/** The typed command of a canonical text (as stored in SQLite). */
export function parseCanonicalCommand(text: string): Command {
  return fromJson(CommandSchema, JSON.parse(text) as JsonValue);
}
