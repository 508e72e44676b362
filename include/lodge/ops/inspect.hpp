#pragma once
// Validation of a file before anything is reserved: name, extension, media type detected
// from the bytes (libmagic), and the digests one read pass produces.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct magic_set;

namespace lodge::ops {

inline constexpr size_t k_max_name_bytes = 255;

// The one rule for a file name, which decides both what upload records and what get
// restores: why `name` (one path component) cannot be one, or nullopt. Not empty, '.' or
// '..'; at most k_max_name_bytes; no backslash; valid UTF-8 without control or bidi
// characters; and nothing that Unicode compatibility folding (NFKC) turns into a separator
// ('/' or a backslash) or into '.' or '..' (U+2025 TWO DOT LEADER alone, say). Anything
// else is a name: '%', spaces and U+2024 ONE DOT LEADER inside a name included.
[[nodiscard]] std::optional<std::string> name_problem(std::string_view name);

// Why a row's relative path cannot be restored under an output directory (empty, absolute,
// or a component name_problem refuses, named), or nullopt. Every path sanitize_relative_path
// returns passes; get checks each row's path with it again before writing.
[[nodiscard]] std::optional<std::string> relative_path_problem(std::string_view path);

// The display name from a path's last component, held to name_problem. BAD_NAME otherwise.
[[nodiscard]] Result<std::string> sanitize_display_name(std::string_view path);

// The relative path a row records (and its object key ends with): `path` split at '/',
// empty and '.' segments dropped, each remaining component held to name_problem (BAD_NAME
// naming the component). A path that is absolute or has a '..' segment is recorded by its
// last component alone, as `aws s3 cp` and `rclone copy` name one file.
[[nodiscard]] Result<std::string> sanitize_relative_path(std::string_view path);

// Lowercase extension after the last dot ("" for none, for dotfiles, or when it is not
// 1-16 ASCII letters and digits).
[[nodiscard]] std::string extension_of(std::string_view name);

// EXTENSION_NOT_ALLOWED when the policy lists extensions and this is not one.
[[nodiscard]] Status check_extension(const config::Policy &p, const std::string &ext);

// TYPE_NOT_ALLOWED when the policy lists media types and this is not one; TYPE_MISMATCH
// when the extension claims a type (pdf, png, docx, ...) and the content is another.
[[nodiscard]] Status check_media_type(const config::Policy &p, const std::string &ext,
                                      const std::string &media_type);

// Whether the media type must come from libmagic: the policy lists media types, or the
// extension is one that claims a kind of content (check_media_type compares it) and the
// signature sniff's answer `sniffed` does not already honour that claim (a .png that sniffs
// as image/png, a .txt that sniffs as UTF-8 text: libmagic could only agree). Otherwise
// `sniffed` is used.
[[nodiscard]] bool needs_libmagic(const config::Policy &p, const std::string &ext,
                                  const std::string &sniffed);

// The media type from the leading bytes by signature alone: png, jpeg, gif, webp, tiff,
// pdf, gzip, zip, bzip2, xz, zstd, 7z, ELF, wasm; valid UTF-8 text without NUL or other
// binary control bytes is text/plain; anything else application/octet-stream; nothing
// at all application/x-empty.
[[nodiscard]] std::string sniff_media_type(const char *data, size_t n);

// The system's media types table (Debian media-types: /etc/mime.types): extension
// (lowercase, no dot) -> type; '#' comments, the first line naming an extension wins.
[[nodiscard]] std::map<std::string, std::string> parse_media_types(std::istream &in);

// The Content-Type an object gets: the type the table names for its extension when the
// detected type agrees with it (the same type; detection without an opinion:
// octet-stream or empty; both text, so style.css detected text/plain is text/css; a zip
// or gzip container named as a format built on it; the same top-level type), otherwise
// the detected type (a text file named .png stays text/plain).
[[nodiscard]] std::string content_type_for(const std::map<std::string, std::string> &table,
                                           const std::string &ext, const std::string &detected);
// The same with /etc/mime.types (read once; without it, the detected type).
[[nodiscard]] std::string content_type_for(const std::string &ext, const std::string &detected);

struct MagicClose {
  void operator()(magic_set *m) const noexcept;
};

// libmagic detection; one per thread (a magic_t is not thread-safe). Every detector of a
// process loads the one read-only mapping of the compiled magic database (mapped at the
// first use, found where libmagic looks: magic_getpath), so each handle costs no copy of
// it. The handle is opened at the first detect().
class MediaTypeDetector {
public:
  MediaTypeDetector();
  // The MIME type of the given leading bytes of a file. Throws LodgeError(INTERNAL)
  // when the magic database cannot be loaded.
  [[nodiscard]] std::string detect(const char *data, size_t n);

private:
  std::unique_ptr<magic_set, MagicClose> m_magic;
};

struct Digests {
  std::string sha256;             // of the whole file
  std::vector<std::string> parts; // of each part_size range, when part_size > 0
  std::string head;               // the first bytes, for type detection
};

// Reads fd from offset 0 to `size` once, through `buf` (reused across files so no
// per-file allocation). FILE_CHANGED when the file ends early or grows past size;
// UNREADABLE on a read error. on_read, when set, is told each chunk's length as it is
// hashed (the progress line's hashing phase).
[[nodiscard]] Result<Digests> digest_file(int fd, uint64_t size, uint64_t part_size, size_t head_bytes,
                                          std::vector<char> &buf,
                                          const std::function<void(uint64_t)> &on_read = {});

} // namespace lodge::ops
