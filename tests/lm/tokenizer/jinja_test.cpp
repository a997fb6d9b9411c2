// The Jinja interpreter behind chat templates (src/lm/tokenizer/jinja/): construct by construct
// against Jinja2 as transformers configures it (fixtures: tools/reference/
// make_chat_template_fixtures.py, jinja_snippets.json), and on hostile or broken templates,
// which must end in a clear error naming the construct and where it is - never a crash, a
// hang or unbounded memory.
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "chat_template_fixtures.h"
#include "base/error.h"
#include "lm/tokenizer/chat_template.h"
#include "lm/tokenizer/jinja/builtins.h"
#include "lm/tokenizer/jinja/error.h"
#include "lm/tokenizer/jinja/template.h"

namespace {

using lm::jinja::Template;
using lm::jinja::Value;

using chat_template_fixtures::fixed_now;
using chat_template_fixtures::kFixtures;
using chat_template_fixtures::read_file;

Value from_json(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return Value::integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_float:
      return Value::number(j.get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::list(std::move(items));
    }
    default: {
      std::vector<std::pair<lm::jinja::DictKey, Value>> items;
      for (const auto& [k, x] : j.items()) items.emplace_back(k, from_json(x));
      return Value::dict(std::move(items));
    }
  }
}

std::vector<std::pair<std::string, Value>> variables(const nlohmann::json& vars) {
  auto v = lm::jinja::make_globals(fixed_now);
  for (const auto& [k, x] : vars.items()) v.emplace_back(k, from_json(x));
  return v;
}

std::string render(const std::string& source, std::vector<std::pair<std::string, Value>> vars = {}) {
  if (vars.empty()) vars = lm::jinja::make_globals(fixed_now);
  return Template(source).render(std::move(vars));
}

// The fixture's users list as a list of dicts with Python's key order (name, role, admin).
Value users_in_python_order(const nlohmann::json& users_json) {
  std::vector<Value> users;
  for (const auto& u : users_json) {
    std::vector<std::pair<lm::jinja::DictKey, Value>> fields;
    for (const char* key : {"name", "role", "admin"}) {
      if (u.contains(key)) fields.emplace_back(key, from_json(u[key]));
    }
    users.push_back(Value::dict(std::move(fields)));
  }
  return Value::list(std::move(users));
}

// The snippets' variables. nlohmann sorts object keys; Python keeps insertion order. The
// snippets' dict variables are written in sorted order or are order-insensitive, except the ones
// rebuilt here in Python's key order, whose order shows in the output.
std::vector<std::pair<std::string, Value>> snippet_variables(const nlohmann::json& json) {
  auto vars = variables(json);
  for (auto& [k, v] : vars) {
    if (k == "obj") {
      v = Value::dict({{"b", from_json(json["obj"]["b"])}, {"a", from_json(json["obj"]["a"])}});
    } else if (k == "users") {
      v = users_in_python_order(json["users"]);
    }
  }
  return vars;
}

struct SnippetCounts {
  int rendered = 0, raised = 0, failed = 0;
};

// One snippet: rendered to Jinja2's text, raising Jinja2's message, or refused as a format error
// that names its line, as the fixture says.
void check_snippet(const nlohmann::json& c, std::vector<std::pair<std::string, Value>> vars, SnippetCounts& counts) {
  const std::string source = c["template"];
  if (c.contains("expected")) {
    try {
      EXPECT_EQ(render(source, std::move(vars)), c["expected"].get<std::string>()) << source;
      ++counts.rendered;
    } catch (const std::exception& e) {
      ADD_FAILURE() << source << ": " << e.what();
    }
  } else if (c.contains("raises")) {
    try {
      render(source, std::move(vars));
      ADD_FAILURE() << source << " rendered";
    } catch (const lm::jinja::TemplateRaised& e) {
      EXPECT_EQ(e.message(), c["raises"].get<std::string>());
      ++counts.raised;
    }
  } else {
    try {
      render(source, std::move(vars));
      ADD_FAILURE() << source << " rendered, Jinja2 said " << c["error"];
    } catch (const base::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("chat template, line "), std::string::npos) << e.what();
      ++counts.failed;
    }
  }
}

TEST(Jinja, SnippetsMatchJinja2) {
  std::ifstream in(kFixtures + "jinja_snippets.json");
  const auto fixture = nlohmann::json::parse(in);
  ASSERT_EQ(fixture["snippets"].size(), 83u);
  SnippetCounts counts;
  for (const auto& c : fixture["snippets"]) check_snippet(c, snippet_variables(fixture["variables"]), counts);
  EXPECT_EQ(counts.rendered, 60);
  EXPECT_EQ(counts.raised, 1);
  EXPECT_EQ(counts.failed, 22);
}

// Runs `source` expecting exception E whose message contains every fragment.
template <typename E>
void expect_error(const std::string& source, std::initializer_list<const char*> fragments) {
  try {
    render(source);
    ADD_FAILURE() << "rendered: " << source.substr(0, 80);
  } catch (const E& e) {
    for (const char* f : fragments) {
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "'" << f << "' not in: " << e.what();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type for " << source.substr(0, 80) << ": " << e.what();
  }
}

TEST(Jinja, UnsupportedConstructsAreNamedWithTheirPosition) {
  expect_error<base::Unsupported>("{% filter wordwrap %}x{% endfilter %}",
                                  {"the filter 'wordwrap'", "line 1, column 11"});
  expect_error<base::Unsupported>("a\n{% raw %}{{ x }}{% endraw %}", {"{% raw %}", "line 2"});
  expect_error<base::Unsupported>("{% include 'x.j2' %}", {"{% include %}"});
  expect_error<base::Unsupported>("{% call f() %}{% endcall %}", {"{% call %}"});
  expect_error<base::Unsupported>("\n\n  {{ x | wordwrap }}", {"the filter 'wordwrap'", "line 3, column 10"});
  expect_error<base::Unsupported>("{{ x is mytest }}", {"the test 'mytest'"});
  expect_error<base::Unsupported>("{% for x in xs recursive %}{% endfor %}", {"recursive"});
  expect_error<base::Unsupported>("{{ f(**kw) }}", {"**kwargs"});
  expect_error<base::Unsupported>("{{ 'a'.format(1) }}", {"format"});  // str.format: not a method we have
}

TEST(Jinja, MalformedTemplatesFailCleanly) {
  expect_error<base::FormatError>("{% if x %}no end", {"line 1", "'elif' or 'else' or 'endif'"});
  expect_error<base::FormatError>("ok\n{{ x ", {"line 2, column 1", "'}}'"});
  expect_error<base::FormatError>("{% endfor %}", {"unknown tag 'endfor'"});
  expect_error<base::FormatError>("{{ 'open }}", {"unterminated string"});
  expect_error<base::FormatError>("{# never closed", {"'#}'"});
  expect_error<base::FormatError>("{{ (1, 2] }}", {"expected ')'"});
  expect_error<base::FormatError>("{{ x.y( }}", {"line 1"});
  expect_error<base::FormatError>("{% break %}", {"outside of a loop"});
  expect_error<base::FormatError>("{{ '\\x4' }}", {"escape"});
  expect_error<base::Unsupported>("{{ 99999999999999999999 }}", {"64 bits"});
}

TEST(Jinja, EvaluationErrorsNameThePosition) {
  expect_error<base::FormatError>("{{ 1 }}\n  {{ u.attr }}", {"line 2, column", "'u' is undefined"});
  expect_error<base::FormatError>("{{ 'a' + 1 }}", {"can only concatenate str"});
  expect_error<base::FormatError>("{{ messages[0].role }}", {"'messages' is undefined"});
  expect_error<lm::jinja::TemplateRaised>("{{ raise_exception('no system role') }}", {"no system role"});
}

TEST(Jinja, DeepNestingIsRefusedNotACrash) {
  const int n = 100000;
  expect_error<base::FormatError>("{{ " + std::string(n, '(') + "1" + std::string(n, ')') + " }}", {"nested"});
  expect_error<base::FormatError>("{{ " + std::string(n, '[') + std::string(n, ']') + " }}", {"nested"});
  std::string nots;
  for (int i = 0; i < n; ++i) nots += "not ";
  expect_error<base::FormatError>("{{ " + nots + "x }}", {"nested"});
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  for (int i = 0; i < 5000; ++i) ifs += "{% endif %}";
  expect_error<base::FormatError>(ifs, {"nested"});
  std::string minus = "{{ ";
  for (int i = 0; i < n; ++i) minus += "-";
  expect_error<base::FormatError>(minus + "1 }}", {"nested"});
  // Within the limit it works.
  EXPECT_EQ(render("{{ " + std::string(50, '(') + "1" + std::string(50, ')') + " }}"), "1");
}

TEST(Jinja, RunawayTemplatesHitLimits) {
  expect_error<base::FormatError>("{% for i in range(100000000) %}{% endfor %}", {"limit"});
  expect_error<base::FormatError>(
      "{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(10) %}{% endfor %}{% endfor %}{% endfor "
      "%}",
      {"loop iterations"});
  expect_error<base::FormatError>("{{ 'x' * 1000000000 }}", {"limit"});
  expect_error<base::FormatError>("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}", {"bytes"});
  expect_error<base::FormatError>(
      "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", {"limit"});
  expect_error<base::FormatError>(
      "{% set ns = namespace(v=[]) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}{% endfor %}", {"nested"});
  expect_error<base::FormatError>(
      "{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", {"limit"});
  // A namespace that contains itself: printing or serialising it must not recurse forever.
  expect_error<base::FormatError>("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", {"nested"});
  expect_error<base::FormatError>("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns.me | tojson }}", {});
  expect_error<base::Unsupported>("{{ 2 ** 100 }}", {"64 bits"});
  // A cycle built in a loop iteration whose scope is gone, then the render goes on (the
  // sanitizer build checks that the cycle is freed).
  EXPECT_EQ(render("{% for i in [1] %}{% set ns = namespace() %}{% set ns.me = ns %}{% endfor %}done"), "done");
}

TEST(Jinja, InvalidUtf8PassesThroughWithoutCrashing) {
  EXPECT_EQ(render("\xff{{ '\xfe' ~ 'a' }}\xc3"),
            "\xff\xfe"
            "a\xc3");
  std::vector<std::pair<std::string, Value>> vars = lm::jinja::make_globals(fixed_now);
  vars.emplace_back("s", Value::string("a\xff\xfe b"));
  EXPECT_EQ(render("{{ s | length }}|{{ s[::-1] }}|{{ s | trim }}|{{ s | tojson }}", vars),
            "5|b \xfe\xff"
            "a|a\xff\xfe b|\"a\xff\xfe b\"");
}

// Random edits of the real templates: each must parse and render, or throw one of the
// project's errors. Anything else (another exception, a crash under the sanitizers) fails.
TEST(Jinja, MutatedRealTemplatesNeverCrash) {
  std::mt19937 rng(1234);
  const char* files[] = {"gemma3", "llama3_1", "qwen3", "mistral_nemo", "granite3_3", "deepseek_r1_distill_qwen"};
  const std::string alphabet = "{}%#-+()[]'\"|.,:~=<>!*/ \nabcdefxyz0123456789_";
  int rendered = 0, refused = 0;
  for (const char* f : files) {
    const std::string original = read_file(kFixtures + "chat_templates/" + f + ".jinja");
    for (int trial = 0; trial < 300; ++trial) {
      std::string t = original;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        const size_t at = rng() % (t.size() + 1);
        switch (rng() % 3) {
          case 0:
            t.insert(at, 1, alphabet[rng() % alphabet.size()]);
            break;
          case 1:
            if (at < t.size()) t.erase(at, 1 + rng() % 8);
            break;
          default:
            if (at < t.size()) t[at] = alphabet[rng() % alphabet.size()];
        }
      }
      lm::ChatTemplateOptions options;
      options.bos_token = "<s>";
      options.now = fixed_now;
      try {
        lm::ChatTemplate(t).render({{"system", "s"}, {"user", "u"}, {"assistant", "a"}, {"user", "v"}}, options);
        ++rendered;
      } catch (const base::FormatError&) {
        ++refused;
      } catch (const base::Unsupported&) {
        ++refused;
      } catch (const std::exception& e) {
        ADD_FAILURE() << f << " mutated: unexpected exception " << e.what();
      }
    }
  }
  EXPECT_GT(rendered, 0);
  EXPECT_GT(refused, 0);
}

}  // namespace
