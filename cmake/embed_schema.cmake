# Writes schema.sql into a C++ source file as one raw string literal.
file(READ ${IN} LODGE_SQL)
file(WRITE ${OUT} "// Generated from schema.sql; do not edit.\n#include <lodge/ledger/schema.hpp>\nnamespace lodge::ledger {\nconst char* const k_schema_sql = R\"lodge_sql(${LODGE_SQL})lodge_sql\";\n}\n")
