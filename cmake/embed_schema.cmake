# Writes a schema file (IN) into a C++ source file (OUT) as one raw string literal named
# NAME (default k_schema_sql) in namespace lodge::ledger.
if(NOT DEFINED NAME)
  set(NAME k_schema_sql)
endif()
get_filename_component(LODGE_SQL_FILE ${IN} NAME)
file(READ ${IN} LODGE_SQL)
file(WRITE ${OUT} "// Generated from ${LODGE_SQL_FILE}; do not edit.\n#include <lodge/ledger/schema.hpp>\nnamespace lodge::ledger {\nextern const char* const ${NAME};\nconst char* const ${NAME} = R\"lodge_sql(${LODGE_SQL})lodge_sql\";\n}\n")
