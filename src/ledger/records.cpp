#include <exception>
#include <iterator>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/records.hpp>

namespace lodge::ledger {

const char *to_string(DedupScope s) {
  switch (s) {
  case DedupScope::owner:
    return "owner";
  case DedupScope::prefix:
    return "prefix";
  case DedupScope::none:
    return "none";
  }
  return "?";
}

std::optional<DedupScope> parse_dedup_scope(std::string_view s) {
  for (auto v : {DedupScope::owner, DedupScope::prefix, DedupScope::none})
    if (s == to_string(v)) return v;
  return std::nullopt;
}

namespace {
// One name per state, in the enum's order: what the ledger stores and lodge prints.
constexpr const char *k_file_status_names[] = {"UPLOADING", "ACTIVE", "UPLOAD_FAILED"};
constexpr const char *k_task_status_names[] = {"PENDING", "PROCESSING", "RETRY",
                                               "SUCCESS", "FAILED",     "IGNORED"};
static_assert(std::size(k_file_status_names) == std::size(k_file_statuses));
static_assert(std::size(k_task_status_names) == std::size(k_task_statuses));
} // namespace

const char *to_string(FileStatus s) {
  return k_file_status_names[static_cast<size_t>(s)];
}

std::optional<FileStatus> parse_file_status(std::string_view s) {
  for (auto v : k_file_statuses)
    if (s == to_string(v)) return v;
  return std::nullopt;
}

const char *to_string(TaskStatus s) {
  return k_task_status_names[static_cast<size_t>(s)];
}

std::optional<TaskStatus> parse_task_status(std::string_view s) {
  for (auto v : k_task_statuses)
    if (s == to_string(v)) return v;
  return std::nullopt;
}

} // namespace lodge::ledger

namespace lodge::ledger {
namespace {
// A confirm that already ran: its outcome or its exception, kept for wait().
class DoneConfirm final : public UploadLedger::PendingConfirm {
public:
  explicit DoneConfirm(const std::function<ConfirmOutcome()> &run) {
    try {
      m_out = run();
    } catch (...) {
      m_error = std::current_exception();
    }
  }
  [[nodiscard]] ConfirmOutcome wait() override {
    if (m_error) std::rethrow_exception(m_error);
    return m_out;
  }

private:
  ConfirmOutcome m_out = ConfirmOutcome::confirmed;
  std::exception_ptr m_error;
};
} // namespace

std::unique_ptr<UploadLedger::PendingConfirm>
UploadLedger::confirm_later(int64_t id, const std::string &etag, const std::string &version_id, int64_t now,
                            CommitTag tag, std::optional<Retire> retire, Durable durable) {
  return std::make_unique<DoneConfirm>([&] {
    if (durable.make)
      if (auto s = durable.make(); !s) throw NotDurable(s.error());
    return confirm(id, etag, version_id, now, tag, retire);
  });
}
std::vector<Result<ReserveResult>> UploadLedger::reserve_batch(const std::vector<ReserveRequest> &reqs,
                                                               int64_t now) {
  std::vector<Result<ReserveResult>> out;
  out.reserve(reqs.size());
  for (const auto &req : reqs) {
    try {
      out.emplace_back(reserve(req, now));
    } catch (const LodgeError &e) {
      out.emplace_back(e.error());
    }
  }
  return out;
}

} // namespace lodge::ledger
