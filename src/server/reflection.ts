/**
 * gRPC server reflection (`grpc.reflection.v1` and the older
 * `grpc.reflection.v1alpha`) served from the descriptors that protoc-gen-es
 * embeds in the generated code.
 *
 * Why: schema-less tools (`buf curl`, grpcurl, Postman, grpcui) ask the server
 * for its schema instead of needing Laneway's .proto files. No npm package
 * serves reflection on connect-node, and everything it needs is already in
 * memory: every generated `DescFile` carries its `FileDescriptorProto`
 * (`file.proto`) and its imports (`file.dependencies`).
 *
 * Behaviour follows grpc-go's reference implementation, because that is what
 * clients are tested against:
 * - A file answer carries the requested file plus its transitive imports.
 *   Within one stream every file goes out at most once, except the requested
 *   file itself, which is always sent (a client asking for it by name must get
 *   an answer even if it came earlier as someone's dependency).
 * - Unknown names are answered with an `error_response` (NOT_FOUND), never by
 *   failing the stream: one reflection stream usually carries many lookups,
 *   and a miss is an ordinary answer.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import type { DescExtension, DescFile, DescService, MessageInitShape } from "@bufbuild/protobuf";
import { nestedTypes } from "@bufbuild/protobuf/reflect";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import type { ConnectRouter } from "@connectrpc/connect";
import {
  ServerReflection as ServerReflectionV1,
  ServerReflectionRequestSchema as RequestSchemaV1,
  ServerReflectionResponseSchema as ResponseSchemaV1,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import type {
  ServerReflectionRequest,
  ServerReflectionResponse,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import {
  ServerReflection as ServerReflectionV1alpha,
  ServerReflectionRequestSchema as RequestSchemaV1alpha,
  ServerReflectionResponseSchema as ResponseSchemaV1alpha,
} from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";

/** Options for {@link reflectionRoutes}. */
export interface ReflectionOptions {
  /**
   * Extra files to describe although no listed service imports them, for
   * example `laneway/errors/v1/errors.proto`, whose `ErrorDetail` only travels
   * inside error details: without it a client cannot decode those details.
   * Their imports are included automatically.
   */
  readonly files?: readonly DescFile[];
}

/**
 * Register `grpc.reflection.v1.ServerReflection` and
 * `grpc.reflection.v1alpha.ServerReflection` on `router`.
 *
 * `services` are the services to advertise (`list_services`) and to describe;
 * pass every service the server serves, including `grpc.health.v1.Health`.
 * The two reflection services are always added, so callers need not list
 * them; duplicates are ignored.
 *
 * Registering on the router (rather than returning two `ServiceImpl`s) keeps
 * both versions in one call, so the server cannot serve one and forget the
 * other. The list is explicit rather than read from `router.handlers` so that
 * what is advertised is a deliberate choice and does not depend on
 * registration order.
 */
export function reflectionRoutes(
  router: ConnectRouter,
  services: readonly DescService[],
  options: ReflectionOptions = {},
): void {
  const index = new ReflectionIndex(
    [...services, ServerReflectionV1, ServerReflectionV1alpha],
    options.files ?? [],
  );

  router.service(ServerReflectionV1, {
    async *serverReflectionInfo(requests) {
      const sent = new Set<string>();
      for await (const request of requests) {
        yield index.answer(request, sent);
      }
    },
  });

  // v1alpha is wire-identical to v1 (same messages, field numbers and types;
  // only the package differs), so it is served by converting through the
  // wire format instead of duplicating the logic. Reflection traffic is tiny.
  router.service(ServerReflectionV1alpha, {
    async *serverReflectionInfo(requests) {
      const sent = new Set<string>();
      for await (const request of requests) {
        const v1Request = fromBinary(RequestSchemaV1, toBinary(RequestSchemaV1alpha, request));
        const v1Response = index.answer(v1Request, sent);
        yield fromBinary(ResponseSchemaV1alpha, toBinary(ResponseSchemaV1, v1Response));
      }
    },
  });
}

/** The longest file or symbol name (and host) a request may name; longer ones are refused without being echoed. */
const MAX_NAME_LENGTH = 1024;

/** The `message_response` oneof of a v1 response, as an init shape. */
type MessageResponse = NonNullable<MessageInitShape<typeof ResponseSchemaV1>["messageResponse"]>;

/**
 * Lookup tables built once from the advertised services: the set of files is
 * fixed for the life of the server, so every request is a map lookup.
 */
class ReflectionIndex {
  readonly #serviceNames: readonly string[];
  /** Files by file name (`foo/bar.proto`). */
  readonly #files = new Map<string, DescFile>();
  /** The file declaring each fully qualified name (types, members, services, methods). */
  readonly #symbols = new Map<string, DescFile>();
  /** Fully qualified names of all message types. */
  readonly #messages = new Set<string>();
  /** Extensions by extendee type name, then field number. */
  readonly #extensions = new Map<string, Map<number, DescExtension>>();
  /** Serialized `FileDescriptorProto`s, encoded on first use. */
  readonly #encoded = new Map<DescFile, Uint8Array>();

  constructor(services: readonly DescService[], extraFiles: readonly DescFile[]) {
    this.#serviceNames = [...new Set(services.map((s) => s.typeName))].sort();
    for (const service of services) this.#addFile(service.file);
    for (const file of extraFiles) this.#addFile(file);
  }

  /** Answer one request of a stream; `sent` holds the file names already sent on it. */
  answer(request: ServerReflectionRequest, sent: Set<string>): ServerReflectionResponse {
    const req = request.messageRequest;
    // No real name is this long; answering with it would echo the input.
    const named = req.case === "fileContainingExtension" ? req.value.containingType : typeof req.value === "string" ? req.value : "";
    if (named.length > MAX_NAME_LENGTH || request.host.length > MAX_NAME_LENGTH) {
      return create(ResponseSchemaV1, {
        messageResponse: { case: "errorResponse", value: { errorCode: Code.InvalidArgument, errorMessage: `names are at most ${MAX_NAME_LENGTH} characters` } },
      });
    }
    const reply = (messageResponse: MessageResponse) =>
      create(ResponseSchemaV1, { validHost: request.host, originalRequest: request, messageResponse });
    const notFound = (message: string) =>
      reply({ case: "errorResponse", value: { errorCode: Code.NotFound, errorMessage: message } });
    const files = (file: DescFile) =>
      reply({
        case: "fileDescriptorResponse",
        value: { fileDescriptorProto: this.#withDependencies(file, sent) },
      });

    switch (req.case) {
      case "listServices":
        return reply({
          case: "listServicesResponse",
          value: { service: this.#serviceNames.map((name) => ({ name })) },
        });
      case "fileByFilename": {
        const file = this.#files.get(req.value);
        return file ? files(file) : notFound(`file not found: ${req.value}`);
      }
      case "fileContainingSymbol": {
        const file = this.#symbols.get(req.value);
        return file ? files(file) : notFound(`symbol not found: ${req.value}`);
      }
      case "fileContainingExtension": {
        const { containingType, extensionNumber } = req.value;
        const ext = this.#extensions.get(containingType)?.get(extensionNumber);
        return ext
          ? files(ext.file)
          : notFound(`extension not found: ${containingType} field ${extensionNumber}`);
      }
      case "allExtensionNumbersOfType": {
        // A known message without extensions gets an empty list (as in
        // grpc-go); only a name that is not a known message is NOT_FOUND.
        const typeName = req.value;
        if (!this.#messages.has(typeName)) return notFound(`message type not found: ${typeName}`);
        const numbers = [...(this.#extensions.get(typeName)?.keys() ?? [])].sort((a, b) => a - b);
        return reply({
          case: "allExtensionNumbersResponse",
          value: { baseTypeName: typeName, extensionNumber: numbers },
        });
      }
      default:
        // An empty or newer kind of request: answer rather than fail the
        // stream, so the client can carry on with its other lookups.
        return reply({
          case: "errorResponse",
          value: { errorCode: Code.InvalidArgument, errorMessage: "unsupported reflection request" },
        });
    }
  }

  /**
   * The requested file (always) and its transitive imports not yet sent on
   * this stream, breadth first, as grpc-go orders them.
   */
  #withDependencies(root: DescFile, sent: Set<string>): Uint8Array[] {
    const out: Uint8Array[] = [];
    const queue: DescFile[] = [root];
    const seen = new Set<string>();
    for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
      const name = file.proto.name;
      if (seen.has(name)) continue;
      seen.add(name);
      if (file === root || !sent.has(name)) {
        sent.add(name);
        out.push(this.#encode(file));
      }
      queue.push(...file.dependencies);
    }
    return out;
  }

  #encode(file: DescFile): Uint8Array {
    let bytes = this.#encoded.get(file);
    if (!bytes) {
      bytes = toBinary(FileDescriptorProtoSchema, file.proto);
      this.#encoded.set(file, bytes);
    }
    return bytes;
  }

  #addFile(file: DescFile): void {
    const name = file.proto.name;
    if (this.#files.has(name)) return;
    this.#files.set(name, file);
    for (const dep of file.dependencies) this.#addFile(dep);

    const symbol = (fullName: string) => this.#symbols.set(fullName, file);
    for (const type of nestedTypes(file)) {
      symbol(type.typeName);
      switch (type.kind) {
        case "message":
          this.#messages.add(type.typeName);
          for (const field of type.fields) symbol(`${type.typeName}.${field.name}`);
          for (const oneof of type.oneofs) symbol(`${type.typeName}.${oneof.name}`);
          // protobuf-es hides map entry messages (`FooEntry`), but they are
          // real types in the descriptor, and protoc-built servers resolve them.
          for (const nested of type.proto.nestedType) {
            if (!nested.options?.mapEntry) continue;
            const entry = `${type.typeName}.${nested.name}`;
            this.#messages.add(entry);
            symbol(entry);
            for (const field of nested.field) symbol(`${entry}.${field.name}`);
          }
          break;
        case "enum": {
          // Enum values are scoped like C++ enumerators: they are siblings of
          // the enum (`pkg.Msg.VALUE`), not its children.
          const scope = type.typeName.slice(0, Math.max(0, type.typeName.lastIndexOf(".")));
          for (const value of type.values) symbol(scope ? `${scope}.${value.name}` : value.name);
          break;
        }
        case "service":
          for (const method of type.methods) symbol(`${type.typeName}.${method.name}`);
          break;
        case "extension": {
          const byNumber = this.#extensions.get(type.extendee.typeName) ?? new Map<number, DescExtension>();
          byNumber.set(type.number, type);
          this.#extensions.set(type.extendee.typeName, byNumber);
          break;
        }
      }
    }
  }
}
