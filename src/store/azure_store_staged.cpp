// az:// staged uploads: no upload object on Azure, only a blob's uncommitted blocks, each
// named by an id that carries the staged upload's handle, the part's number and its MD5;
// completing commits the parts' blocks as the blob's block list. Parts may also be sent by
// a client through a SAS (presign_part).
#include "azure_store.hpp"

#include <algorithm>
#include <cstdio>
#include <lodge/crypto/random.hpp>
#include <lodge/util/strings.hpp>
#include <map>
#include <optional>

namespace lodge::store::az {
namespace {

std::string random_handle() {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(crypto::random_below(UINT64_MAX)));
  return buf;
}

// A block id, before its base64: the staged upload's handle (16 hex digits), '-', the part
// number in six digits, '-', and the part's MD5 in lowercase hex: 56 bytes (Azure takes up
// to 64, and every block id of a blob must have one length). The MD5 is the one Put Block
// sent as Content-MD5, which the service checks against the bytes before it stages them: so
// the id itself proves what a staged block holds (Get Block List lists only ids and sizes),
// and a staged upload can be resumed from it. A part a client sends through a presigned URL
// (reserve --parts) carries no Content-MD5 lodge chose, so its id has k_unchecked in the
// MD5's place: same length, never taken for a digest. Ids lodge wrote before the MD5 was
// added (handle-NNNNNN, 23 bytes) are still read, without a digest.
constexpr size_t k_md5_hex_size = 32;
const std::string k_unchecked(k_md5_hex_size, '-');

struct BlockId {
  std::string handle;
  int number = 0;
  std::string md5_hex; // "" when the id vouches for no digest
  bool legacy = false; // the old form, handle-NNNNNN
};

std::string block_id(const std::string &handle, int number, const std::string &md5_hex) {
  char n[16];
  std::snprintf(n, sizeof n, "%06d", number);
  return util::base64_encode(handle + "-" + n + "-" + (md5_hex.empty() ? k_unchecked : md5_hex));
}

bool lower_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// nullopt for an id lodge did not make (another writer's blocks at the key).
std::optional<BlockId> parse_block_id(const std::string &id) {
  auto raw = util::base64_decode(id);
  if (!raw) return std::nullopt;
  const auto dash = raw->find('-');
  if (dash == 0 || dash == std::string::npos) return std::nullopt;
  std::string_view rest = std::string_view(*raw).substr(dash + 1);
  constexpr size_t k_digits = 6;
  if (rest.size() < k_digits ||
      !std::all_of(rest.begin(), rest.begin() + k_digits, [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  BlockId out{raw->substr(0, dash), static_cast<int>(*util::parse_int(rest.substr(0, k_digits))), {}};
  if (rest.size() == k_digits) { // the old form
    out.legacy = true;
    return out;
  }
  std::string_view digest = rest.substr(k_digits + 1);
  if (rest[k_digits] != '-' || digest.size() != k_md5_hex_size) return std::nullopt;
  if (lower_hex(digest)) out.md5_hex = std::string(digest);
  return out;
}
} // namespace

// No request: Azure has no upload object; the handle names the blocks.
Result<std::string> AzureStore::begin_staged(const StagedRequest & /*req*/) {
  return random_handle();
}

Result<Part> AzureStore::put_part(const std::string &key, const std::string &handle, int number,
                                  const Body &b, int64_t deadline_steady_ms) {
  if (number < 1 || number > k_max_blocks)
    return Error(Errc::internal,
                 "PUT BLOCK " + key + ": part number " + std::to_string(number) + " out of range");
  auto md5 = range_md5(b, key);
  if (!md5) return md5.error();
  FileRangeBody body(b);
  // The id names the MD5 the service checks (block_id): a part re-sent with the same bytes
  // replaces its block; with other bytes it is another block, and the one completed is
  // the one this Part names.
  std::string id = block_id(handle, number, util::hex_encode(md5->data(), md5->size()));
  auto r = m_client->put_block(key, id, body, crypto::to_base64(md5.value()), deadline_steady_ms);
  if (!r) return changed_or(body, r.error(), key);
  if (body.sent_sha256_hex() != b.sha256_hex) return file_changed(key);
  return Part{number, id, b.sha256_hex};
}

Result<PutResult> AzureStore::complete_staged(const StagedRequest &req, const std::string &handle,
                                              const std::vector<Part> &parts, int64_t deadline_steady_ms) {
  std::vector<Part> sorted = parts;
  std::sort(sorted.begin(), sorted.end(), [](const Part &a, const Part &b) { return a.number < b.number; });
  std::vector<std::string> ids;
  ids.reserve(sorted.size());
  for (const auto &p : sorted) {
    // Each part's block by the id put_part or list_parts gave it (its etag): the id
    // carries the part's MD5, which lodge cannot make again from a number.
    if (p.etag.empty()) {
      ids.push_back(block_id(handle, p.number, {}));
      continue;
    }
    auto id = parse_block_id(p.etag);
    if (!id || id->handle != handle || id->number != p.number)
      return Error(Errc::internal, "PUT BLOCK LIST " + req.key + ": part " + std::to_string(p.number) +
                                       " names a block of another part or upload");
    ids.push_back(p.etag);
  }
  azure::WriteOptions o;
  o.content_type = req.content_type;
  o.metadata = req.metadata;
  set_options(o, req.options);
  o.deadline_steady_ms = deadline_steady_ms;
  auto r = m_client->put_block_list(req.key, ids, o);
  if (!r) return r.error();
  return PutResult{r->etag, r->version_id};
}

Status AzureStore::abort_staged(const std::string &key, const std::string & /*handle*/) {
  return clear_uncommitted(key);
}

Status AzureStore::list_staged(const std::string &prefix,
                               const std::function<bool(const StagedUpload &)> &visit) {
  // A blob with only uncommitted blocks is listed (length 0) by include=uncommittedblobs
  // and unknown to Get Blob Properties; its handle is in its block ids.
  std::vector<std::pair<std::string, int64_t>> candidates;
  auto s = m_client->list_blobs(prefix, azure::Include::uncommitted, [&](const azure::ListedBlob &b) {
    if (b.size == 0) candidates.emplace_back(b.name, 0);
    return true;
  });
  if (!s) return s;
  for (const auto &[name, when] : candidates) {
    auto p = m_client->get_properties(name);
    if (p) continue;
    if (p.error().code != Errc::not_found) return p.error();
    auto blocks = m_client->get_block_list(name, azure::BlockListType::uncommitted);
    if (!blocks && blocks.error().code == Errc::not_found) continue;
    if (!blocks) return blocks.error();
    if (blocks->uncommitted.empty()) continue;
    const std::string &first = blocks->uncommitted.front().name;
    std::string handle;
    if (auto id = parse_block_id(first)) {
      handle = id->handle;
    } else { // not lodge's: what comes before its last '-'
      handle = util::base64_decode(first).value_or("");
      handle = handle.substr(0, handle.rfind('-'));
    }
    if (!visit(StagedUpload{name, handle, when})) return ok_status();
  }
  return ok_status();
}

// The blocks of this handle staged and not committed, one per part number: Get Block List
// gives each id and size, the id the part's MD5 (block_id). Put Block of an id already
// staged replaces that block; a part re-sent with other bytes has another id, and the
// service lists uncommitted blocks in the order they were staged (Azurite 3.37 does so,
// a same id moving to the end), so the last block of a number is the newest. Whichever
// block of a number is listed, its id names exactly that block's bytes: completing with it
// stores what its MD5 says.
Result<std::vector<StoredPart>> AzureStore::list_parts(const std::string &key, const std::string &handle) {
  auto blocks = m_client->get_block_list(key, azure::BlockListType::uncommitted);
  if (!blocks) return blocks.error(); // NOT_FOUND: no blob of that name, not even uncommitted
  std::map<int, StoredPart> parts;
  for (const auto &b : blocks->uncommitted) {
    auto id = parse_block_id(b.name);
    if (!id || id->handle != handle) continue; // another staged upload's, or not lodge's
    // Staged by a lodge before the MD5 was in the id: no block of this blob can be staged
    // in the new form (one length per blob), so it cannot go on; like one gone, it is
    // aborted and begun again.
    if (id->legacy)
      return Error(Errc::not_found, "LIST PARTS " + key + ": staged upload " + handle +
                                        " has block ids of an earlier lodge (no digest): it cannot be "
                                        "continued");
    parts[id->number] = StoredPart{id->number, b.size, b.name, {}, id->md5_hex};
  }
  // A committed (or cleared) staged upload leaves no uncommitted blocks: it is gone.
  if (parts.empty())
    return Error(Errc::not_found, "LIST PARTS " + key + ": no staged upload " + handle + " (no blocks)");
  std::vector<StoredPart> out;
  out.reserve(parts.size());
  for (auto &[number, p] : parts)
    out.push_back(std::move(p));
  return out;
}

// A SAS with `w` (Put Block needs write; Azure has no permission for Put Block alone) on
// this blob and the part's block id in the URL. A SAS pins no query parameter nor header:
// until it expires its holder may also stage other blocks, commit a block list or write
// the blob with Put Blob (and set its metadata), even after lodge confirm; never read,
// delete or tag it (no r, d, t). So confirm checks each part's number and size and the
// whole object (size, stamp, SHA-256) before the row is ACTIVE, and the URLs should expire
// soon after the upload is meant to end. The id has k_unchecked for the MD5: the sender
// chooses whether to send Content-MD5, so no digest lodge knows is vouched for.
Result<PresignedPut> AzureStore::presign_part(const PresignPartRequest &req) {
  if (req.number < 1 || req.number > k_max_blocks)
    return Error(Errc::internal, "presigned PUT BLOCK " + req.key + ": part number " +
                                     std::to_string(req.number) + " out of range");
  auto url = m_client->presign(req.key, req.expires_s, "w");
  if (!url) return url.error();
  const std::string &u = url.value();
  const auto q = u.find('?');
  PresignedPut p;
  p.url = u.substr(0, q) +
          "?comp=block&blockid=" + azure::url_encode(block_id(req.handle, req.number, {}), false) + "&" +
          u.substr(q + 1);
  p.headers.emplace_back("content-length", std::to_string(req.size));
  return p;
}

} // namespace lodge::store::az
