#pragma once
// Internal to the store layer: the backends' factories and small helpers.

#include <cerrno>
#include <lodge/store/store.hpp>
#include <lodge/util/fd.hpp>
#include <unistd.h>

namespace lodge::store {

std::unique_ptr<ObjectStore> make_s3_store(const StoreOptions &o, const std::string &bucket,
                                           const std::string &prefix);
std::unique_ptr<ObjectStore> make_file_store(const std::string &url, const std::string &root);
std::unique_ptr<ObjectStore> with_failpoints(std::unique_ptr<ObjectStore> inner);

using util::write_all;

} // namespace lodge::store
