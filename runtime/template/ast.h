// The syntax tree a template parses to: built once by the parser, then only read by the renderer
// (so a parsed Template can be rendered from several threads).
#ifndef LLMRT_TEMPLATE_AST_H_
#define LLMRT_TEMPLATE_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/template/value.h"

namespace llmrt::jinja {

struct Expression;
struct Statement;
using ExpressionPtr = std::unique_ptr<Expression>;
using StatementPtr = std::unique_ptr<Statement>;
using Body = std::vector<StatementPtr>;

struct KeywordArgument {
  std::string name;
  ExpressionPtr value;
};

struct Expression {
  enum class Kind {
    kConstant,     // value
    kName,         // name
    kAttribute,    // operands[0].name
    kItem,         // operands[0][operands[1]]
    kSlice,        // operands[0][operands[1]:operands[2]:operands[3]] (null parts absent)
    kCall,         // operands[0](arguments..., keywords...)
    kFilter,       // operands[0] | name(arguments..., keywords...)
    kTest,         // operands[0] is [not] name(arguments...)
    kUnary,        // op operands[0]: "-", "+", "not"
    kBinary,       // operands[0] op operands[1]: + - * / // % ** ~ and or
    kCompare,      // operands[0] ops[0] operands[1] ops[1] operands[2] ...
    kConditional,  // operands[1] if operands[0] else operands[2] (operands[2] may be null)
    kList,         // [operands...]
    kTuple,        // (operands...)
    kDict,         // {operands[0]: operands[1], ...}
  };
  Kind kind;
  int line = 0;
  int column = 0;
  Value value;
  std::string name;  // name, attribute, filter, test or operator
  bool negated = false;
  std::vector<ExpressionPtr> operands;
  std::vector<ExpressionPtr> arguments;
  std::vector<KeywordArgument> keywords;
  std::vector<std::string> compare_ops;
};

struct MacroParameter {
  std::string name;
  ExpressionPtr default_value;  // null: required
};

struct Statement {
  enum class Kind {
    kData,         // text
    kOutput,       // {{ expression }}
    kIf,           // conditions[i] -> bodies[i]; a trailing body without condition is the else
    kFor,          // for targets in expression [if condition]: body [else: else_body]
    kSet,          // set targets = expression; or set name.attribute = expression
    kSetBlock,     // set targets %}body{% endset, then filters
    kMacro,        // macro name(parameters): body
    kCallBlock,    // call(parameters) expression: body
    kFilterBlock,  // filter chain: body (expression is the filter chain over a placeholder)
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string text;
  ExpressionPtr expression;
  ExpressionPtr condition;
  std::vector<ExpressionPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  // Assignment targets: one name, several (tuple unpacking), or "namespace.attribute".
  std::vector<std::string> targets;
  std::string attribute;  // set ns.attribute
  std::string name;       // macro name
  std::vector<MacroParameter> parameters;
};

}  // namespace llmrt::jinja

#endif  // LLMRT_TEMPLATE_AST_H_
