#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <lodge/crypto/sha256.hpp>
#include <lodge/ops/inspect.hpp>
#include <lodge/util/strings.hpp>
#include <magic.h>
#include <map>
#include <set>
#include <unistd.h>

namespace lodge::ops {

Result<std::string> sanitize_display_name(std::string_view path) {
  auto slash = path.find_last_of('/');
  std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  auto bad = [&](const std::string &why) {
    return Error(Errc::bad_name, "unusable file name '" + util::escape_for_terminal(name) + "': " + why);
  };
  if (name.empty() || name == "." || name == "..") return bad("empty");
  if (name.size() > k_max_name_bytes)
    return bad("longer than " + std::to_string(k_max_name_bytes) + " bytes");
  if (name.find('\\') != std::string_view::npos)
    return bad("contains a backslash (a path part on other systems)");
  // escape_for_terminal changes exactly the bytes that are control, bidi or invalid
  // UTF-8 (and doubles backslashes, excluded above): a name it leaves alone is clean.
  if (util::escape_for_terminal(name) != name)
    return bad("contains control, bidi-override or invalid UTF-8 characters");
  return std::string(name);
}

Result<std::string> sanitize_relative_path(std::string_view path) {
  std::vector<std::string> parts;
  bool escapes = !path.empty() && path.front() == '/';
  for (auto &seg : util::split(path, '/')) {
    if (seg.empty() || seg == ".") continue;
    if (seg == "..") escapes = true;
    parts.push_back(std::move(seg));
  }
  if (parts.empty()) return sanitize_display_name(path); // says why it is unusable
  if (escapes) parts.erase(parts.begin(), parts.end() - 1);
  std::string out;
  for (const auto &part : parts) {
    auto clean = sanitize_display_name(part);
    if (!clean) return clean.error();
    out += (out.empty() ? "" : "/") + clean.value();
  }
  return out;
}

std::string extension_of(std::string_view name) {
  auto dot = name.find_last_of('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 >= name.size()) return {};
  auto ext = name.substr(dot + 1);
  if (ext.size() > 16) return {};
  for (char c : ext)
    if (!std::isalnum(static_cast<unsigned char>(c))) return {};
  return util::to_lower(ext);
}

Status check_extension(const config::Policy &p, const std::string &ext) {
  if (p.extensions.empty()) return ok_status();
  if (std::find(p.extensions.begin(), p.extensions.end(), ext) != p.extensions.end()) return ok_status();
  std::string list;
  for (const auto &e : p.extensions)
    list += (list.empty() ? "" : ", ") + e;
  return Error(Errc::extension_not_allowed, "extension '" + (ext.empty() ? std::string("(none)") : ext) +
                                                "' is not allowed by policy " + p.name +
                                                " (allowed: " + list + ")");
}

namespace {
// Extensions that claim a specific kind of content, and the detected types that honour
// the claim. Extensions not listed claim nothing and match any content.
const std::map<std::string, std::set<std::string>> &claims() {
  static const std::map<std::string, std::set<std::string>> k{
      {"pdf", {"application/pdf"}},
      {"png", {"image/png"}},
      {"jpg", {"image/jpeg"}},
      {"jpeg", {"image/jpeg"}},
      {"gif", {"image/gif"}},
      {"webp", {"image/webp"}},
      {"tif", {"image/tiff"}},
      {"tiff", {"image/tiff"}},
      {"svg", {"image/svg+xml", "text/xml", "application/xml", "text/plain"}},
      {"doc", {"application/msword", "application/x-ole-storage", "application/CDFV2"}},
      {"xls", {"application/vnd.ms-excel", "application/x-ole-storage", "application/CDFV2"}},
      {"docx",
       {"application/vnd.openxmlformats-officedocument.wordprocessingml.document", "application/zip"}},
      {"xlsx", {"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "application/zip"}},
      {"pptx",
       {"application/vnd.openxmlformats-officedocument.presentationml.presentation", "application/zip"}},
      {"odt", {"application/vnd.oasis.opendocument.text", "application/zip"}},
      {"zip", {"application/zip"}},
      {"jar", {"application/java-archive", "application/zip"}},
      {"gz", {"application/gzip", "application/x-gzip"}},
      {"tgz", {"application/gzip", "application/x-gzip"}},
      {"bz2", {"application/x-bzip2"}},
      {"xz", {"application/x-xz"}},
      {"zst", {"application/zstd"}},
      {"7z", {"application/x-7z-compressed"}},
      {"tar", {"application/x-tar"}},
      {"mp3", {"audio/mpeg"}},
      {"mp4", {"video/mp4"}},
      {"wav", {"audio/x-wav", "audio/wav"}},
      {"exe", {"application/x-dosexec", "application/vnd.microsoft.portable-executable"}},
      {"txt", {"text/*", "application/json", "application/csv"}},
      {"md", {"text/*"}},
      {"csv", {"text/*", "application/csv"}},
      {"json", {"application/json", "text/plain"}},
      {"html", {"text/html", "text/plain", "text/xml"}},
      {"xml", {"text/xml", "application/xml", "text/plain"}},
  };
  return k;
}

bool matches(const std::set<std::string> &allowed, const std::string &type) {
  if (allowed.contains(type)) return true;
  auto slash = type.find('/');
  return slash != std::string::npos && allowed.contains(type.substr(0, slash) + "/*");
}
} // namespace

Status check_media_type(const config::Policy &p, const std::string &ext, const std::string &media_type) {
  // A spoofed name is the sharper diagnosis, so it is checked first.
  auto it = claims().find(ext);
  if (it != claims().end() && !matches(it->second, media_type))
    return Error(Errc::type_mismatch, "the name says ." + ext + " but the content is " + media_type);
  if (!p.media_types.empty() && std::find(p.media_types.begin(), p.media_types.end(),
                                          util::to_lower(media_type)) == p.media_types.end())
    return Error(Errc::type_not_allowed,
                 "content is " + media_type + ", which policy " + p.name + " does not allow");
  return ok_status();
}

void MagicClose::operator()(magic_set *m) const noexcept {
  magic_close(m);
}

MediaTypeDetector::MediaTypeDetector()
    : m_magic(magic_open(MAGIC_MIME_TYPE | MAGIC_NO_CHECK_COMPRESS | MAGIC_ERROR)) {
  if (!m_magic) throw LodgeError(Errc::internal, "magic_open failed");
  if (magic_load(m_magic.get(), nullptr) != 0)
    throw LodgeError(Errc::internal,
                     std::string("cannot load the libmagic database: ") + magic_error(m_magic.get()));
}

std::string MediaTypeDetector::detect(const char *data, size_t n) {
  if (n == 0) return "application/x-empty";
  const char *t = magic_buffer(m_magic.get(), data, n);
  return t ? t : "application/octet-stream";
}

Result<Digests> digest_file(int fd, uint64_t size, uint64_t part_size, size_t head_bytes,
                            std::vector<char> &buf) {
  Digests d;
  crypto::Sha256 whole, part;
  if (buf.size() < (1U << 20)) buf.resize(1U << 20);
  uint64_t done = 0;
  uint64_t in_part = 0;
  while (done < size) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - done));
    if (part_size > 0) want = static_cast<size_t>(std::min<uint64_t>(want, part_size - in_part));
    ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error(Errc::unreadable, std::string("read failed: ") + std::strerror(errno));
    if (n == 0) return Error(Errc::file_changed, "the file shrank while it was being read");
    if (d.head.size() < head_bytes)
      d.head.append(buf.data(), std::min(static_cast<size_t>(n), head_bytes - d.head.size()));
    whole.update(buf.data(), static_cast<size_t>(n));
    done += static_cast<uint64_t>(n);
    if (part_size > 0) {
      part.update(buf.data(), static_cast<size_t>(n));
      in_part += static_cast<uint64_t>(n);
      if (in_part == part_size || done == size) {
        d.parts.push_back(crypto::to_hex(part.finish()));
        in_part = 0;
      }
    }
  }
  char probe = 0;
  if (::pread(fd, &probe, 1, static_cast<off_t>(size)) > 0)
    return Error(Errc::file_changed, "the file grew while it was being read");
  d.sha256 = crypto::to_hex(whole.finish());
  return d;
}

} // namespace lodge::ops
