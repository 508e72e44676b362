#!/usr/bin/env node
// azblob: a small command-line client over the official Azure Storage SDK
// (@azure/storage-blob), the independent checker of what lodge wrote to an Azure Blob
// endpoint (Azurite in the test suite), as the aws CLI is for S3. Every answer is JSON on
// stdout (`get` writes the blob's bytes instead).
//
//   azblob.js [--endpoint URL] [--account NAME] [--key KEY] COMMAND ARGS...
//
// The endpoint defaults to $AZBLOB_ENDPOINT (Azurite's http://127.0.0.1:PORT/devstoreaccount1),
// the account to the endpoint's first path segment, the key to $AZBLOB_KEY or the well-known
// devstoreaccount1 key. Commands:
//   create-container C
//   list C [--prefix P] [--uncommitted]
//        every blob: name, size, etag, content_type, metadata, tags. --uncommitted lists
//        instead every blob that has uncommitted blocks (staged by Put Block, never committed
//        by Put Block List), each with its blocks and whether a committed blob of that name
//        exists (false: the name exists only as uncommitted blocks, invisible to a listing).
//   head C B                   properties, metadata and tags of one blob
//   get C B                    the blob's bytes to stdout
//   put C B FILE|- [--if-none-match] [--meta K=V]... [--tag K=V]... [--content-type T]
//        [--concurrent N]      N simultaneous puts of one name (bodies "FILE-bytes + #i"):
//                              one outcome per writer, for the conditional-create experiment
//   set-tags C B K=V...
//   url-set-tags URL K=V...    Set Blob Tags through a blob URL that carries a SAS, and no
//                              key: what a holder of that URL may do
//   block-list C B [--type uncommitted|committed|all]
//   stage-blocks C B --count N [--size BYTES] [--id-prefix P]
//                              Put Block N times and never commit (a losing staged upload)
//   commit-blocks C B [--if-none-match] [--empty] [--meta K=V]... [--tag K=V]...
//                              Put Block List of every uncommitted block, in staged order
//                              (--empty: of none, which leaves an empty committed blob and
//                              drops the uncommitted blocks)
//   delete C B [--if-tags EXPR] [--no-snapshots]
// A service error prints {"error": {"status": HTTP status, "code": x-ms-error-code,
// "message": ...}} and exits 3; a usage error exits 2.
"use strict";

const fs = require("fs");
const {
  AnonymousCredential,
  BlobServiceClient,
  BlockBlobClient,
  StorageSharedKeyCredential,
} = require("@azure/storage-blob");

const WELL_KNOWN_KEY =
  "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

function usage(message) {
  process.stderr.write(`azblob: ${message}\n`);
  process.exit(2);
}

// argv: positional arguments and --options (repeatable ones collect into arrays).
const REPEATED = new Set(["meta", "tag"]);
const FLAGS = new Set(["uncommitted", "if-none-match", "no-snapshots", "empty"]);

function parse(argv) {
  const positional = [];
  const options = { meta: [], tag: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "-" || !a.startsWith("--")) {
      positional.push(a);
      continue;
    }
    const name = a.slice(2);
    if (FLAGS.has(name)) {
      options[name] = true;
      continue;
    }
    if (i + 1 >= argv.length) usage(`${a} needs a value`);
    const value = argv[++i];
    if (REPEATED.has(name)) options[name].push(value);
    else options[name] = value;
  }
  return { positional, options };
}

function pairs(list, what) {
  const out = {};
  for (const item of list) {
    const eq = item.indexOf("=");
    if (eq <= 0) usage(`${what} ${JSON.stringify(item)}: expected NAME=VALUE`);
    out[item.slice(0, eq)] = item.slice(eq + 1);
  }
  return out;
}

function client(options) {
  const endpoint = (options.endpoint || process.env.AZBLOB_ENDPOINT || "").replace(/\/+$/, "");
  if (!endpoint) usage("no endpoint: pass --endpoint or set AZBLOB_ENDPOINT");
  const account = options.account || new URL(endpoint).pathname.split("/").filter(Boolean)[0];
  if (!account) usage(`endpoint ${endpoint}: no account in its path, pass --account`);
  const key = options.key || process.env.AZBLOB_KEY || WELL_KNOWN_KEY;
  const credential = new StorageSharedKeyCredential(account, key);
  // One try: a checker must report what the server answered, not what a retry made of it.
  return new BlobServiceClient(endpoint, credential, { retryOptions: { maxTries: 1 } });
}

function serviceError(e) {
  if (e && typeof e.statusCode === "number") {
    return {
      status: e.statusCode,
      code: e.code || (e.details && e.details.errorCode) || null,
      message: String(e.message || "").split("\n")[0],
    };
  }
  return null;
}

function out(value) {
  process.stdout.write(JSON.stringify(value) + "\n");
}

function unquote(etag) {
  return etag ? etag.replace(/^"|"$/g, "") : etag;
}

function blobEntry(item) {
  const p = item.properties || {};
  return {
    name: item.name,
    size: p.contentLength,
    etag: unquote(p.etag),
    content_type: p.contentType,
    metadata: item.metadata || {},
    tags: item.tags || {},
    tag_count: p.tagCount || 0,
  };
}

async function readBody(source) {
  if (source === undefined) usage("put needs FILE or - (stdin)");
  if (source === "-") {
    const chunks = [];
    for await (const c of process.stdin) chunks.push(c);
    return Buffer.concat(chunks);
  }
  return fs.readFileSync(source);
}

async function list(container, options) {
  const cc = client(options).getContainerClient(container);
  const prefix = options.prefix || undefined;
  const blobs = [];
  if (!options.uncommitted) {
    for await (const item of cc.listBlobsFlat({ prefix, includeMetadata: true, includeTags: true })) {
      blobs.push(blobEntry(item));
    }
    return blobs;
  }
  // A blob with only uncommitted blocks is listed only with include=uncommittedblobs and
  // has no properties of its own (Get Blob Properties answers 404); a committed blob may
  // carry uncommitted blocks too (a staged upload of the same name that never committed).
  const committed = new Set();
  for await (const item of cc.listBlobsFlat({ prefix })) committed.add(item.name);
  for await (const item of cc.listBlobsFlat({ prefix, includeUncommitedBlobs: true })) {
    const bl = await cc.getBlockBlobClient(item.name).getBlockList("uncommitted");
    const blocks = (bl.uncommittedBlocks || []).map((b) => ({ name: b.name, size: b.size }));
    if (blocks.length > 0 || !committed.has(item.name)) {
      blobs.push({ name: item.name, committed: committed.has(item.name), uncommitted_blocks: blocks });
    }
  }
  return blobs;
}

async function head(container, name, options) {
  const bc = client(options).getContainerClient(container).getBlockBlobClient(name);
  const p = await bc.getProperties();
  const tags = await bc.getTags();
  return {
    name,
    size: p.contentLength,
    etag: unquote(p.etag),
    content_type: p.contentType,
    cache_control: p.cacheControl || null,
    access_tier: p.accessTier || null,
    content_md5: p.contentMD5 ? Buffer.from(p.contentMD5).toString("base64") : null,
    metadata: p.metadata || {},
    tags: tags.tags || {},
    tag_count: p.tagCount || 0,
    version_id: p.versionId || null,
  };
}

async function get(container, name, options) {
  const bc = client(options).getContainerClient(container).getBlockBlobClient(name);
  const body = await bc.downloadToBuffer();
  await new Promise((resolve, reject) => process.stdout.write(body, (e) => (e ? reject(e) : resolve())));
}

async function putOne(bc, body, options) {
  const put = {
    metadata: pairs(options.meta, "--meta"),
    tags: pairs(options.tag, "--tag"),
    blobHTTPHeaders: { blobContentType: options["content-type"] || "application/octet-stream" },
  };
  if (options["if-none-match"]) put.conditions = { ifNoneMatch: "*" };
  try {
    const r = await bc.upload(body, body.length, put);
    return { status: 201, etag: unquote(r.etag) };
  } catch (e) {
    const err = serviceError(e);
    if (!err) throw e;
    return { error: err };
  }
}

async function put(container, name, source, options) {
  const bc = client(options).getContainerClient(container).getBlockBlobClient(name);
  const body = await readBody(source);
  if (options.concurrent === undefined) {
    const r = await putOne(bc, body, options);
    if (r.error) throw Object.assign(new Error(r.error.message), { azblob: r.error });
    return r;
  }
  const n = Number(options.concurrent);
  if (!Number.isInteger(n) || n < 1) usage(`--concurrent ${options.concurrent}: expected a count`);
  // Every writer's request is built first, then all are sent at once: N requests in
  // flight on N connections.
  const writers = [];
  for (let i = 0; i < n; i++) {
    const own = Buffer.concat([body, Buffer.from(` #${i}`)]);
    writers.push(putOne(bc, own, options).then((r) => Object.assign({ writer: i, size: own.length }, r)));
  }
  return Promise.all(writers);
}

async function setTags(container, name, tagArgs, options) {
  const bc = client(options).getContainerClient(container).getBlockBlobClient(name);
  await bc.setTags(pairs(tagArgs, "tag"));
  return { tags: (await bc.getTags()).tags };
}

async function urlSetTags(url, tagArgs) {
  const bc = new BlockBlobClient(url, new AnonymousCredential(), { retryOptions: { maxTries: 1 } });
  const r = await bc.setTags(pairs(tagArgs, "tag"));
  return { status: r._response ? r._response.status : 204 };
}

async function blockList(container, name, options) {
  const type = options.type || "uncommitted";
  if (!["uncommitted", "committed", "all"].includes(type)) usage(`--type ${type}: uncommitted, committed or all`);
  const bc = client(options).getContainerClient(container).getBlockBlobClient(name);
  const bl = await bc.getBlockList(type);
  const blocks = (l) => (l || []).map((b) => ({ name: b.name, size: b.size }));
  return { committed: blocks(bl.committedBlocks), uncommitted: blocks(bl.uncommittedBlocks) };
}

async function stageBlocks(container, name, options) {
  const count = Number(options.count);
  const size = Number(options.size || 1024);
  if (!Number.isInteger(count) || count < 1) usage(`--count ${options.count}: expected a count`);
  if (!Number.isInteger(size) || size < 1) usage(`--size ${options.size}: expected bytes`);
  const prefix = options["id-prefix"] || "azblob";
  const bc = client(options).getContainerClient(container).getBlockBlobClient(name);
  const ids = [];
  for (let i = 1; i <= count; i++) {
    // Every block id of a blob has the same length (the service requires it).
    const id = Buffer.from(`${prefix}-${String(i).padStart(6, "0")}`).toString("base64");
    await bc.stageBlock(id, Buffer.alloc(size, i % 251), size);
    ids.push(id);
  }
  return { staged: ids };
}

async function commitBlocks(container, name, options) {
  const bc = client(options).getContainerClient(container).getBlockBlobClient(name);
  let ids = [];
  if (!options.empty) {
    const bl = await bc.getBlockList("uncommitted");
    ids = (bl.uncommittedBlocks || []).map((b) => b.name);
  }
  const opts = { metadata: pairs(options.meta, "--meta"), tags: pairs(options.tag, "--tag") };
  if (options["if-none-match"]) opts.conditions = { ifNoneMatch: "*" };
  const r = await bc.commitBlockList(ids, opts);
  return { status: 201, etag: unquote(r.etag), blocks: ids.length };
}

async function del(container, name, options) {
  const bc = client(options).getContainerClient(container).getBlockBlobClient(name);
  const opts = {};
  if (!options["no-snapshots"]) opts.deleteSnapshots = "include";
  if (options["if-tags"]) opts.conditions = { tagConditions: options["if-tags"] };
  const r = await bc.delete(opts);
  return { status: r._response ? r._response.status : 202 };
}

async function main() {
  const { positional, options } = parse(process.argv.slice(2));
  const [command, container, name, ...rest] = positional;
  const need = (n) => {
    if (positional.length - 1 < n) usage(`${command} needs ${n} argument(s)`);
  };
  switch (command) {
    case "create-container":
      need(1);
      await client(options).getContainerClient(container).create();
      return out({ container });
    case "list":
      need(1);
      return out(await list(container, options));
    case "head":
      need(2);
      return out(await head(container, name, options));
    case "get":
      need(2);
      return get(container, name, options);
    case "put":
      need(3);
      return out(await put(container, name, rest[0], options));
    case "set-tags":
      need(3);
      return out(await setTags(container, name, rest, options));
    case "url-set-tags":
      need(2);
      return out(await urlSetTags(container, [name, ...rest]));
    case "block-list":
      need(2);
      return out(await blockList(container, name, options));
    case "stage-blocks":
      need(2);
      return out(await stageBlocks(container, name, options));
    case "commit-blocks":
      need(2);
      return out(await commitBlocks(container, name, options));
    case "delete":
      need(2);
      return out(await del(container, name, options));
    default:
      usage(`unknown command ${JSON.stringify(command || "")} (see the head of ${__filename})`);
  }
}

main().catch((e) => {
  const err = (e && e.azblob) || serviceError(e);
  if (err) {
    out({ error: err });
    process.exit(3);
  }
  process.stderr.write(`azblob: ${(e && e.stack) || e}\n`);
  process.exit(1);
});
