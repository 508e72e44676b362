#pragma once
// The S3 store's batched removal (ObjectStore::plan_removal, remove_planned): the objects
// of a bucket that was never versioned, each read by HEAD (its stamp, its ETag), deleted
// together by DeleteObjects with each ETag as its condition, and one listing of the
// incomplete multipart uploads for the whole batch.

#include <functional>
#include <lodge/s3/client.hpp>
#include <lodge/store/store.hpp>
#include <string>
#include <vector>

namespace lodge::store {

// What plan_removal reads: the current object's stamp and ETag, and (pending_only, with
// state tags) its tags. A key S3's XML cannot carry, or a version that shows the bucket is
// versioned now, is left per_object.
[[nodiscard]] Result<PlannedRemoval> s3_plan_removal(s3::Client &client, bool tag_state,
                                                     const std::string &key, const Stamp &stamp,
                                                     DeleteGuard guard);

// remove_planned: `per_object` is the store's remove_owned, for what the batch does not settle.
[[nodiscard]] std::vector<Result<Removal>>
s3_remove_planned(s3::Client &client, const std::vector<PlannedRemoval> &plans,
                  const std::function<Result<Removal>(const PlannedRemoval &)> &per_object);

} // namespace lodge::store
