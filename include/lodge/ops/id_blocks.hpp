#pragma once
// A restored ledger knows it. The ledger issues record ids only inside a block whose end
// the store holds too, in a marker object <root>/.lodge/<ledger uuid> (JSON: ledger,
// high_water, updated_at) that only ever moves up. A ledger that finds the store's mark
// above everything it ever reserved was restored from a backup or copied: it moves its
// sequence past the mark before issuing any id (so no new stamp can match another key),
// records the divergence, and says so once. The rule is here, above the ledger's roles;
// the ledger only stores the numbers (ledger::IdBlockLedger).

#include <cstdint>
#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace lodge::ops {

inline constexpr int64_t k_id_block = 1000;

// "<root>/.lodge/": lodge's own metadata in the store, never an object of any row.
[[nodiscard]] std::string metadata_prefix(const store::ObjectStore &s);
// The key of a ledger's id marker: "<root>/.lodge/<uuid>".
[[nodiscard]] std::string id_marker_key(const store::ObjectStore &s, const std::string &uuid);

struct IdMarker {
  bool exists = false;
  int64_t high_water = 0; // the highest id the ledger may issue
  std::string tag;        // the version read, for the conditional write
};

// Reads a ledger's marker (absent: exists = false). METADATA_CORRUPT when it is not the
// JSON lodge writes for that uuid; the store's error when it cannot be read.
[[nodiscard]] Result<IdMarker> read_id_marker(store::ObjectStore &s, const std::string &uuid);

// One per upload run, shared by its workers. A run opens a new block at its first
// reserve (so a copy of the ledger taken between runs finds the store's mark above its
// own at its next run) and advances another before an id past the block's end is
// issued: one marker PUT per block, never one per file.
class IdBlocks {
public:
  explicit IdBlocks(int64_t block_size = k_id_block) : m_block(block_size) {}
  // UploadLedger::reserve with req.id_limit set to the end the store's marker covers; advances
  // the block (and handles a divergence) when the ledger says the id would pass it.
  // Errors: reading or writing the marker failed (nothing was reserved). The ledger: the
  // reserve, and advance's.
  [[nodiscard]] Result<ledger::ReserveResult> reserve(ledger::ReserveLedger &l, store::ObjectStore &s,
                                                      ledger::ReserveRequest req, int64_t now,
                                                      const util::Clock &clock);
  // The same for several requests in one ledger transaction (UploadLedger::reserve_batch),
  // each element as reserve would answer it: one the block's end stopped is reserved again
  // on its own, after the block advanced.
  [[nodiscard]] std::vector<Result<ledger::ReserveResult>>
  reserve_batch(ledger::ReserveLedger &l, store::ObjectStore &s, std::vector<ledger::ReserveRequest> reqs,
                int64_t now, const util::Clock &clock);
  // Makes the ledger's block end at least `need` (a new block regardless when `fresh`),
  // writing the store's marker first. Safe with other processes: the ledger's
  // transaction decides who advances, the marker is replaced only over the version read.
  // The ledger: the numbers (its id blocks), the uuid the marker is named by and the
  // location messages name.
  [[nodiscard]] Status advance(ledger::MarkLedger &l, store::ObjectStore &s, int64_t need, bool fresh,
                               const util::Clock &clock);
  [[nodiscard]] int64_t block_end() const;

private:
  Status advance_locked(ledger::MarkLedger &l, store::ObjectStore &s, int64_t need, bool fresh,
                        const util::Clock &clock);
  mutable std::mutex m_mutex;
  int64_t m_block;
  int64_t m_end = 0;
  bool m_opened = false;
};

// Reads the store's marker and compares it with the ledger (sweep, repair, reconcile):
// a mark above everything the ledger reserved is recorded as a divergence (said once).
// Returns the ledger's divergence state after the check. Errors: the marker could not
// be read.
[[nodiscard]] Result<std::optional<ledger::Divergence>>
check_divergence(ledger::MarkLedger &l, store::ObjectStore &s, const util::Clock &clock);

// LEDGER_DIVERGED for `what` (repair, sweep, reconcile --apply) while the ledger is diverged.
void refuse_if_diverged(const std::optional<ledger::Divergence> &d, const std::string &what);

} // namespace lodge::ops
