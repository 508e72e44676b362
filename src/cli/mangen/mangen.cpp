// lodge_mangen: the man pages, written at build time from the CLI::App tree that parses lodge's
// command line (build_app) and the prose of each page (man/). Not installed.
//
//   lodge_mangen SOURCE_DIR OUT_DIR DATE
//
// Every file of SOURCE_DIR named NAME.1, NAME.5 or NAME.7 is a page's prose: OUT_DIR/NAME.N is
// that prose with the title line (.TH) added and each placeholder line filled from the tree:
//   .\" @NAME@       lodge-CMD \- the command's description
//   .\" @SYNOPSIS@   the command's usage (lodge(1): every command's)
//   .\" @OPTIONS@    every option of the command (lodge(1): the global options), in the tree's
//                    order; a .TP item of the prose after the placeholder (up to the next .SH)
//                    that names an option is that option's entry, the others are generated from
//                    the option's names, value, description, default and choices
//   .\" @COMMANDS@   every command, with its page and description
//   .\" @SEE_ALSO@   every other page
// lodge-CMD.1 belongs to the visible command CMD: a command without its prose, prose without its
// command, or an OPTIONS item naming no option of its command fails the build.

#include "cli/cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using lodge::cli::Command;

namespace {

// Text for a roff text line: backslashes, hyphens (so that options copy as typed), quotes
// and anything outside ASCII escaped.
std::string roff(const std::string &s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else if (c == '\'') {
      out += "\\(aq";
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      // UTF-8 to \[uXXXX].
      int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
      uint32_t cp = c & (0x3f >> (len - 1));
      for (int k = 1; k < len && i + 1 < s.size(); ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[++i]) & 0x3f);
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\[u%04X]", cp);
      out += buf;
    }
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out = "\\&" + out;
  return out;
}

std::string bold(const std::string &s) {
  return "\\fB" + roff(s) + "\\fR";
}
std::string italic(const std::string &s) {
  return "\\fI" + roff(s) + "\\fR";
}

// What lodge --help lists: a hidden command or option has no group.
std::vector<CLI::App *> commands_of(CLI::App &app) {
  return app.get_subcommands([](CLI::App *a) { return !a->get_group().empty(); });
}
bool visible(const CLI::Option *o) {
  return !o->get_group().empty();
}

// An option's names as typed: -j, --jobs.
std::vector<std::string> names_of(const CLI::Option *o) {
  std::vector<std::string> out;
  for (const auto &s : o->get_snames())
    out.push_back("-" + s);
  for (const auto &l : o->get_lnames())
    out.push_back("--" + l);
  return out;
}

// The metavariable of an option's value: its type name without the validators' descriptions
// ("INT:INT in [1 - 256]" is INT); the rest is said as what it accepts.
std::string value_name(const CLI::Option *o) {
  const std::string t = o->get_type_name();
  return t.substr(0, t.find(':'));
}
std::vector<std::string> value_limits(const CLI::Option *o) {
  std::vector<std::string> out;
  std::string t = o->get_type_name();
  for (size_t at = t.find(':'); at != std::string::npos;) {
    const size_t next = t.find(':', at + 1);
    std::string part = t.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    if (!part.empty() && part.front() != '{') out.push_back(part); // {A,B}: the choices, said apart
    at = next;
  }
  return out;
}

bool takes_value(const CLI::Option *o) {
  return o->get_expected_max() > 0;
}
bool repeats(const CLI::Option *o) {
  return o->get_expected_max() > 1 || o->get_multi_option_policy() == CLI::MultiOptionPolicy::TakeAll;
}

// The generated term of an option: \fB-j\fR, \fB--jobs\fR \fIINT\fR.
std::string term(const CLI::Option *o) {
  std::string out;
  for (const auto &n : names_of(o))
    out += (out.empty() ? "" : ", ") + bold(n);
  if (takes_value(o)) out += " " + italic(value_name(o)) + (repeats(o) ? "\\ ...\\&" : "");
  return out;
}

// A positional's word: its type name (PATH), else its name in capitals.
std::string positional_word(const CLI::Option *o) {
  std::string w = value_name(o);
  if (w.empty() || w == "TEXT") {
    w = o->get_name();
    std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return std::toupper(c); });
  }
  return w;
}

std::vector<CLI::Option *> options_of(CLI::App &app) {
  return app.get_options([](const CLI::Option *o) { return visible(o) && o->nonpositional(); });
}
std::vector<CLI::Option *> positionals_of(CLI::App &app) {
  return app.get_options([](const CLI::Option *o) { return !o->nonpositional(); });
}

// A command's synopsis: lodge [global-options] CMD, then each option, then the positionals.
// `brief`: the required options only, the others as [options] (lodge(1)'s list).
std::string synopsis(CLI::App &cmd, bool brief) {
  std::string out = "\\%" + bold("lodge") + " [" + italic("global-options") + "] " + bold(cmd.get_name());
  bool optional = false;
  for (auto *o : options_of(cmd)) {
    if (o->get_lnames() == std::vector<std::string>{"help"}) continue;
    std::string word = bold(names_of(o).back());
    if (takes_value(o)) word += "\\ " + italic(value_name(o));
    if (o->get_required()) {
      out += "\n\\%" + word;
    } else if (brief) {
      optional = true;
    } else {
      out += "\n\\%[" + word + "]" + (repeats(o) ? "\\ ...\\&" : "");
    }
  }
  if (brief && optional) out += "\n\\%[" + italic("options") + "]";
  for (auto *p : positionals_of(cmd)) {
    std::string word = italic(positional_word(p)) + (p->get_expected_max() > 1 ? "\\ ...\\&" : "");
    out += "\n\\%" + (p->get_required() ? word : "[" + word + "]");
  }
  return out + "\n";
}

// One .TP item of the prose's OPTIONS: the term lines (after .TP and each .TQ) and the body.
struct Item {
  std::vector<std::string> terms;
  std::vector<std::string> body;
  std::set<std::string> names; // the option names its terms mention
  bool used = false;
};

// The option names a term line mentions (fonts, quotes and \- undone).
std::set<std::string> mentioned(const std::string &line) {
  std::string s = std::regex_replace(line, std::regex(R"(\\f[BIRP]|\\%|\\&)"), "");
  s = std::regex_replace(s, std::regex(R"(\\-)"), "-");
  s = std::regex_replace(s, std::regex(R"(^\.[A-Z]+\s*)"), "");
  std::set<std::string> out;
  static const std::regex tok(R"((^|[^\w-])(--?[A-Za-z0-9][A-Za-z0-9-]*))");
  for (std::sregex_iterator it(s.begin(), s.end(), tok), end; it != end; ++it)
    out.insert((*it)[2].str());
  return out;
}

bool is_request(const std::string &line, const char *req) {
  const size_t n = std::char_traits<char>::length(req);
  return line.compare(0, n, req) == 0 && (line.size() == n || line[n] == ' ');
}

std::vector<Item> parse_items(const std::vector<std::string> &lines, const std::string &where) {
  std::vector<Item> items;
  int nested = 0; // inside .RS ... .RE: a list of the item's own (status --check's reasons)
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string &l = lines[i];
    nested += is_request(l, ".RS") ? 1 : is_request(l, ".RE") ? -1 : 0;
    if (nested == 0 && (is_request(l, ".TP") || (is_request(l, ".TQ") && !items.empty()))) {
      if (i + 1 >= lines.size()) throw std::runtime_error(where + ": " + l + " without a term");
      if (is_request(l, ".TP")) items.emplace_back();
      items.back().terms.push_back(lines[++i]);
      for (const auto &n : mentioned(lines[i]))
        items.back().names.insert(n);
    } else if (items.empty()) {
      if (!l.empty()) throw std::runtime_error(where + ": text after @OPTIONS@ before its first .TP: " + l);
    } else {
      items.back().body.push_back(l);
    }
  }
  return items;
}

// Every option of a command (lodge(1): the root's) as a .TP item, the prose's item where it
// has one. Non-default groups (upload's filtering) get a subsection.
std::string options_section(CLI::App &app, std::vector<Item> items, const std::string &where) {
  std::string out;
  for (auto *p : positionals_of(app))
    out += ".TP\n" + italic(positional_word(p)) + (p->get_expected_max() > 1 ? "\\ ...\\&" : "") + "\n" +
           roff(p->get_description()) + "\n";
  std::string group = "Options";
  const bool root = app.get_parent() == nullptr;
  for (auto *o : options_of(app)) {
    if (!root && o->get_group() != group) {
      group = o->get_group();
      out += ".SS " + roff(group) + "\n";
    }
    const auto names = names_of(o);
    auto it = std::find_if(items.begin(), items.end(), [&](const Item &item) {
      return std::any_of(names.begin(), names.end(), [&](const auto &n) { return item.names.contains(n); });
    });
    if (it == items.end()) {
      out += ".TP\n" + term(o) + "\n" + roff(o->get_description()) + "\n";
      std::string facts;
      if (!o->get_default_str().empty()) facts += "Default: " + bold(o->get_default_str()) + ". ";
      auto values = lodge::cli::option_choices(o);
      for (size_t i = 0; i < values.size(); ++i)
        facts += (i == 0 ? "One of: " : ", ") + bold(values[i]) + (i + 1 == values.size() ? ". " : "");
      for (const auto &limit : value_limits(o))
        facts += "Accepts " + roff(limit) + ". ";
      if (!facts.empty()) out += ".br\n" + facts.substr(0, facts.size() - 1) + "\n";
      continue;
    }
    if (it->used) continue; // one item for several options (--keep-daily, --keep-weekly, ...)
    it->used = true;
    out += ".TP\n" + it->terms.front() + "\n";
    for (size_t t = 1; t < it->terms.size(); ++t)
      out += ".TQ\n" + it->terms[t] + "\n";
    // A name the prose's term leaves out (a short form) is added as a term of its own.
    if (std::any_of(names.begin(), names.end(), [&](const auto &n) { return !it->names.contains(n); }))
      out += ".TQ\n" + term(o) + "\n";
    for (const auto &b : it->body)
      out += b + "\n";
  }
  for (const auto &item : items)
    if (!item.used)
      throw std::runtime_error(where + ": OPTIONS describes '" + item.terms.front() +
                               "', which names no option of the command");
  return out;
}

struct Page {
  std::string file;    // lodge-upload.1
  std::string name;    // lodge-upload
  std::string section; // 1
  CLI::App *app;       // its command; the root for lodge(1); null for sections 5 and 7
};

std::string see_also(const std::vector<Page> &pages, const Page &self, bool more) {
  std::vector<std::string> refs;
  for (const auto &p : pages)
    if (p.file != self.file) refs.push_back(".BR " + roff(p.name) + " (" + p.section + ")");
  std::string out;
  for (size_t i = 0; i < refs.size(); ++i)
    out += refs[i] + (i + 1 < refs.size() || more ? "," : "") + "\n";
  return out;
}

std::string commands_list(CLI::App &root) {
  std::string out;
  for (auto *c : commands_of(root))
    out += ".TP\n.BR " + roff("lodge-" + c->get_name()) + " (1)\n" + roff(c->get_description()) + "\n";
  return out;
}

std::string root_synopsis(CLI::App &root) {
  std::string out = bold("lodge") + " [" + italic("global-options") + "] " + italic("command") + " [" +
                    italic("options") + "] [" + italic("arguments") + "]\n.br\n" + bold("lodge") + " " +
                    bold("--version") + " [" + bold("--json") + "]\n";
  for (auto *c : commands_of(root))
    out += ".br\n" + synopsis(*c, true);
  return out;
}

std::vector<std::string> read_lines(const fs::path &p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    lines.push_back(l);
  return lines;
}

// The page from its prose: the title line, then each line of the prose with the placeholders
// filled (the prose's own leading comment, which says what it is, left out).
std::string render(const Page &page, const std::vector<Page> &pages, const std::vector<std::string> &lines,
                   const std::string &date) {
  static const char *titles[] = {"", "User Commands", "", "", "", "File Formats", "", "Miscellaneous"};
  std::string upper = page.name;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  std::string out =
      ".\\\" Generated by lodge_mangen from man/" + page.file + "; edit that file, not this one.\n";
  out += ".TH \"" + roff(upper) + "\" \"" + page.section + "\" \"" + date +
         "\" \"lodge " LODGE_VERSION "\" \"" + titles[std::stoi(page.section)] + "\"\n";
  const std::string where = "man/" + page.file;
  size_t i = 0;
  while (i < lines.size() && lines[i].rfind(".\\\"", 0) == 0)
    ++i;
  auto need_app = [&](const std::string &what) {
    if (!page.app) throw std::runtime_error(where + ": " + what + " in a page of no command");
    return page.app;
  };
  const bool root = page.app && page.app->get_parent() == nullptr;
  for (; i < lines.size(); ++i) {
    const std::string &l = lines[i];
    if (l == ".\\\" @NAME@") {
      out += roff(page.name) + " \\- " + roff(need_app(l)->get_description()) + "\n";
    } else if (l == ".\\\" @SYNOPSIS@") {
      // Left-adjusted: no stretched blanks between the words.
      out += ".ad l\n" + (root ? root_synopsis(*need_app(l)) : synopsis(*need_app(l), false)) + ".ad\n";
    } else if (l == ".\\\" @COMMANDS@") {
      out += commands_list(*need_app(l));
    } else if (l == ".\\\" @SEE_ALSO@") {
      const bool more = i + 1 < lines.size() && !is_request(lines[i + 1], ".SH");
      out += see_also(pages, page, more);
    } else if (l == ".\\\" @OPTIONS@") {
      size_t end = i + 1;
      while (end < lines.size() && !is_request(lines[end], ".SH"))
        ++end;
      auto items = parse_items(
          {lines.begin() + static_cast<long>(i) + 1, lines.begin() + static_cast<long>(end)}, where);
      out += options_section(*need_app(l), std::move(items), where);
      i = end - 1;
    } else if (l.rfind(".\\\" @", 0) == 0) {
      throw std::runtime_error(where + ": unknown placeholder " + l);
    } else {
      out += l + "\n";
    }
  }
  return out;
}

// The pages the prose in `src` makes, lodge(1) first; each visible command must have its own.
std::vector<Page> find_pages(const fs::path &src, CLI::App &root) {
  std::vector<Page> pages;
  std::set<std::string> commands;
  for (auto *c : commands_of(root))
    commands.insert(c->get_name());
  for (const auto &e : fs::directory_iterator(src)) {
    const std::string file = e.path().filename().string();
    static const std::regex page_name(R"((lodge(?:-[a-z0-9-]+|\.conf)?)\.([157]))");
    std::smatch m;
    if (!std::regex_match(file, m, page_name)) continue;
    Page p{file, m[1].str(), m[2].str(), nullptr};
    if (p.name == "lodge" && p.section == "1") {
      p.app = &root;
    } else if (p.section == "1") {
      const std::string cmd = p.name.substr(std::string("lodge-").size());
      if (!commands.contains(cmd))
        throw std::runtime_error("man/" + file + ": lodge has no command '" + cmd + "'");
      p.app = root.get_subcommand(cmd);
      commands.erase(cmd);
    }
    pages.push_back(p);
  }
  for (const auto &c : commands)
    throw std::runtime_error("lodge " + c + " has no page: write its prose in man/lodge-" + c + ".1");
  std::sort(pages.begin(), pages.end(), [](const Page &a, const Page &b) {
    // lodge(1), the commands' pages, then sections 5 and 7; by name within each.
    auto rank = [](const Page &p) { return p.name == "lodge" ? 0 : p.section == "1" ? 1 : 2; };
    return std::make_tuple(rank(a), a.section, a.name) < std::make_tuple(rank(b), b.section, b.name);
  });
  return pages;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: lodge_mangen SOURCE_DIR OUT_DIR DATE\n");
    return 2;
  }
  try {
    const fs::path src = argv[1], out = argv[2];
    CLI::App app;
    lodge::cli::Globals globals;
    bool version = false;
    std::vector<Command> commands = lodge::cli::build_app(app, globals, version);
    const auto pages = find_pages(src, app);
    fs::create_directories(out);
    // A page of a command that is gone must not stay behind to be installed.
    for (const auto &e : fs::directory_iterator(out))
      if (std::regex_match(e.path().filename().string(), std::regex(R"(.*\.[157])"))) fs::remove(e.path());
    for (const auto &page : pages) {
      std::ofstream f(out / page.file);
      f << render(page, pages, read_lines(src / page.file), argv[3]);
      if (!f) throw std::runtime_error("cannot write " + (out / page.file).string());
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "lodge_mangen: %s\n", e.what());
    return 1;
  }
  return 0;
}
