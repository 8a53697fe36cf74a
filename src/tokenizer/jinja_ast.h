#pragma once
// Syntax tree of a Jinja template, as the parser builds it and the interpreter walks it.
// Every node keeps the template line it came from, for error messages.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace moe::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,    // value
    Name,       // name
    List,       // items
    Tuple,      // items
    Dict,       // items as key, value pairs
    Attr,       // a.name
    Index,      // a[b]
    Slice,      // a[items[0]:items[1]:items[2]] (null parts are absent)
    Call,       // a(items, kwargs)
    Filter,     // a | name(items, kwargs)
    Test,       // a is [not] name(items); negated
    Unary,      // op a    ("not", "-", "+")
    Binary,     // a op b  (or and == != < > <= >= in notin + - * / // % ** ~)
    Ternary,    // b if a else c
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // Name, Attr, Call-less names, Filter, Test, op of Unary/Binary
  bool negated = false;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Break, Continue, Macro };
  Kind kind;
  int line = 0;
  std::string text;                              // Text
  ExprPtr expr;                                  // Output; For: iterable; Set: value
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: condition and body for if and each elif
  Body body;                                     // For, SetBlock, Macro
  Body else_body;                                // If, For
  std::vector<std::string> targets;              // For / Set / SetBlock: names bound; Macro: [name, params...]
  std::vector<ExprPtr> defaults;                 // Macro: default of each param (null when none)
  std::string attr;                              // Set ns.attr = ...: attr (targets[0] is ns)
  ExprPtr cond;                                  // For: filter condition
};

// Parses template source; throws moe::Error("chat template line N: ...").
Body parse_template(const std::string& source);

}  // namespace moe::jinja
