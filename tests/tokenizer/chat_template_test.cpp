// The template interpreter on constructs the two conformance templates do not use, on
// Python semantics where JavaScript would differ, and on its error messages.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace moe {
namespace {

std::string render(const std::string& tmpl, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  return ChatTemplate(tmpl).render(ctx);
}

std::string error_of(const std::string& tmpl, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  try {
    render(tmpl, ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ChatTemplate, PythonSpellingsOfValues) {
  EXPECT_EQ(render("{{ true }} {{ none }} {{ 1.5 }} {{ 2.0 }} {{ [1, 'a'] }} {{ {'k': none} }}"), "True None 1.5 2.0 [1, 'a'] {'k': None}");
  EXPECT_EQ(render("{{ x | tojson }}", {{"x", {{"b", 1}, {"a", {true, nullptr, "é\n"}}}}}), R"({"b": 1, "a": [true, null, "é\n"]})");
  EXPECT_EQ(render("{{ x | tojson(indent=2) }}", {{"x", {{"a", {1, 2}}}}}), "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
}

TEST(ChatTemplate, LoopsScopesAndNamespaces) {
  EXPECT_EQ(render("{% for x in [3, 4, 5] if x != 4 %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% endfor %}"), "1/2,2/2");
  EXPECT_EQ(render("{% set n = 1 %}{% for x in [1] %}{% set n = 2 %}{% endfor %}{{ n }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(n=1) %}{% for x in [1, 2] %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}"), "4");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"a", 1}, {"b", 2}}}}), "a=1;b=2;");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "1");
}

TEST(ChatTemplate, StringMethodsAndFilters) {
  EXPECT_EQ(render("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}"),
            "a b|a|['a', 'b', '', 'c']|['a', 'b']");
  EXPECT_EQ(render("{{ 'héllo'[1] }}{{ 'héllo'[::-1] }}{{ 'héllo' | length }}"), "éolléh5");
  EXPECT_EQ(render("{{ [3, 1, 2] | sort | join('-') }} {{ 'Ab' | upper }} {{ none | default('d') }} {{ x | default('u') }}"),
            "1-2-3 AB None u");
  EXPECT_EQ(render("{{ m | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }}",
                   {{"m", {{{"role", "user"}, {"c", 1}}, {{"role", "bot"}, {"c", 2}}}}}),
            "[1]");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 7 / 2 }} {{ 'a' ~ 1 }} {{ 'ab' * 2 }}"), "3 -4 1 3.5 a1 abab");
}

TEST(ChatTemplate, WhitespaceControlFollowsTrimAndLstripBlocks) {
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc\n"), "a\n  b\nc");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("x {{- ' y ' -}} z"), "x y z");
  EXPECT_EQ(render("a {# note #}\nb"), "a b");
}

TEST(ChatTemplate, MacrosAndSetBlocks) {
  EXPECT_EQ(render("{% macro greet(name, p='Hi') %}{{ p }} {{ name }}{% endmacro %}{{ greet('Bo') }}/{{ greet('Al', p='Yo') }}"),
            "Hi Bo/Yo Al");
  EXPECT_EQ(render("{% set s %}in{{ 1 }}{% endset %}[{{ s }}]"), "[in1]");
}

TEST(ChatTemplate, ErrorsNameTheConstructAndLine) {
  EXPECT_NE(error_of("line one\n{% include 'x' %}").find("line 2: '{% include %}' is not supported"), std::string::npos)
      << error_of("line one\n{% include 'x' %}");
  EXPECT_NE(error_of("{{ x | frobnicate }}").find("line 1: filter 'frobnicate' is not supported"), std::string::npos);
  EXPECT_NE(error_of("\n\n{{ 'a'.zfill(3) }}").find("line 3"), std::string::npos);
  EXPECT_NE(error_of("{{ raise_exception('bad role') }}").find("bad role"), std::string::npos);
  EXPECT_NE(error_of("{% if x %}unclosed").find("missing '{% endif %}'"), std::string::npos);
  EXPECT_NE(error_of("{{ a.b.c }}", {{"a", nlohmann::ordered_json::object()}}).find("'a.b' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("unsupported operand types for +: 'str' and 'int'"), std::string::npos);
}

TEST(ChatTemplate, ChatContextCarriesTokensAndExtras) {
  const auto ctx = chat_context(nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}}}), true, "<s>", "",
                                {{"enable_thinking", false}});
  EXPECT_EQ(render("{{ bos_token }}{{ messages[0].content }}{{ add_generation_prompt }}{{ eos_token is defined }}{{ enable_thinking }}", ctx),
            "<s>hiTrueFalseFalse");
}

}  // namespace
}  // namespace moe
