#include "cli/cli.hpp"

int main(int argc, char **argv) {
  return lodge::cli::main(argc, argv);
}
