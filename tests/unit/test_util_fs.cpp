// The filesystem-type table (util/fs.hpp) and its two readers: the SQLite driver's refusal
// of a ledger on a network filesystem and doctor's warning. They decide by one table, so a
// filesystem doctor calls unsafe is one the driver refuses, and the reverse.
#include "ledger/drivers.hpp"
#include "support.hpp"

#include <lodge/ops/read/doctor.hpp>
#include <lodge/util/fs.hpp>

using namespace lodge;

TEST_CASE("every network filesystem in the table is refused by the ledger driver and warned of by doctor") {
  int network = 0;
  for (const auto &t : util::fs_types()) {
    if (!t.network) continue;
    ++network;
    CAPTURE(t.name);
    REQUIRE(util::network_fs_name(t.magic) == t.name);
    auto e = test::thrown_error([&] { ledger::refuse_network_fs("/mnt/x/ledger.db", t.magic, false); });
    REQUIRE(e);
    CHECK(e->code == Errc::ledger_on_network_fs);
    CHECK(e->message.find("(" + std::string(t.name) + ")") != std::string::npos);
    CHECK(e->message.find("/mnt/x/ledger.db") != std::string::npos);
    CHECK_FALSE(test::thrown_error([&] { ledger::refuse_network_fs("/mnt/x/ledger.db", t.magic, true); }));
    auto c = ops::doctor::filesystem("/mnt/x", t.magic);
    CHECK(c.name == "ledger.filesystem");
    CHECK(c.level == ops::doctor::Level::warn);
    CHECK(c.message.find("/mnt/x is on " + std::string(t.name) + ", a network filesystem") !=
          std::string::npos);
    CHECK_FALSE(c.fix.empty());
  }
  // The ones doctor alone knew before: the driver opened a ledger there without a word.
  for (unsigned long magic : {0x0BD00BD0UL /*lustre*/, 0x013111A8UL /*ibrix*/, 0x19830326UL /*fhgfs*/,
                              0x5346414FUL /*openafs*/, 0x6969UL /*nfs*/})
    CHECK(util::network_fs_name(magic));
  CHECK(network >= 14);
}

TEST_CASE("a local or unknown filesystem is neither refused nor warned of") {
  for (const auto &t : util::fs_types()) {
    if (t.network) continue;
    CAPTURE(t.name);
    CHECK_FALSE(util::network_fs_name(t.magic));
    CHECK(util::fs_type_name(t.magic) == t.name);
    CHECK_FALSE(test::thrown_error([&] { ledger::refuse_network_fs("/var/ledger.db", t.magic, false); }));
    auto c = ops::doctor::filesystem("/var", t.magic);
    CHECK(c.level == ops::doctor::Level::ok);
    CHECK(c.message == "/var is on " + std::string(t.name));
  }
  CHECK_FALSE(util::fs_type_name(0x1234));
  CHECK_FALSE(test::thrown_error([] { ledger::refuse_network_fs("/var/ledger.db", 0x1234, false); }));
  CHECK(ops::doctor::filesystem("/var", 0x1234).message == "/var is on type 0x1234");
}

TEST_CASE("the table names each magic once") {
  auto types = util::fs_types();
  for (size_t i = 0; i < types.size(); ++i)
    for (size_t j = i + 1; j < types.size(); ++j) {
      CHECK(types[i].magic != types[j].magic);
      CHECK(types[i].name != types[j].name);
    }
}
