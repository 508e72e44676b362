// libFuzzer: every S3 XML parser on arbitrary bytes must return a value or nullopt.
#include <cstdint>
#include <lodge/s3/xml.hpp>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view in(reinterpret_cast<const char *>(data), size);
  (void)lodge::s3::parse_error(in);
  (void)lodge::s3::parse_list_objects_v2(in);
  (void)lodge::s3::parse_list_versions(in);
  (void)lodge::s3::parse_list_uploads(in);
  (void)lodge::s3::parse_initiate_multipart(in);
  (void)lodge::s3::parse_complete_multipart(in);
  (void)lodge::s3::parse_iso8601_ms(in);
  return 0;
}
