import { createRegistry } from "@bufbuild/protobuf";
import { createValidator, type Validator } from "@bufbuild/protovalidate";
import { file_laneway_validate_v1_rules } from "../../gen/laneway/validate/v1/rules_pb.js";

/**
 * The protovalidate validator for Laneway's contracts. It is given the
 * predefined rules of `laneway/validate/v1/rules.proto` (identifier,
 * node_id, hex32, receipt, swarm); without them a validator would not know
 * those extensions. The server's validation interceptor and the cores that
 * validate contract messages themselves (the Kmap lane) share this one.
 */
export const contractValidator: Validator = createValidator({ registry: createRegistry(file_laneway_validate_v1_rules) });
