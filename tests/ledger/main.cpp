// The ledger contract suite's doctest main. Which ledger it runs against:
// tests/ledger/backend.hpp.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
