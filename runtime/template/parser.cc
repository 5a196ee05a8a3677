#include "runtime/template/parser.h"

#include <cerrno>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace llmrt::jinja {
namespace {

// The name of the placeholder a {% filter %} or {% set x | f %} body is bound to while its
// filters run. It has a space, so no template can name it.
constexpr char kBodyPlaceholder[] = " body";

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  absl::StatusOr<Body> ParseTemplate() {
    Body body;
    std::string end_tag;
    if (absl::Status status = ParseBody({}, body, end_tag); !status.ok()) return status;
    return body;
  }

 private:
  using Kind = Token::Kind;

  const Token& Current() const { return tokens_[position_]; }
  const Token& Peek(size_t ahead = 1) const {
    return tokens_[std::min(position_ + ahead, tokens_.size() - 1)];
  }
  void Advance() {
    if (position_ + 1 < tokens_.size()) ++position_;
  }
  bool IsOperator(std::string_view op) const {
    return Current().kind == Kind::kOperator && Current().text == op;
  }
  bool IsName(std::string_view name) const {
    return Current().kind == Kind::kName && Current().text == name;
  }

  static std::string Describe(const Token& token) {
    switch (token.kind) {
      case Kind::kEnd:
        return "end of template";
      case Kind::kBlockEnd:
        return "end of statement block";
      case Kind::kVariableEnd:
        return "end of print statement";
      case Kind::kData:
        return "template data";
      case Kind::kString:
        return "string";
      case Kind::kInteger:
        return "integer";
      case Kind::kFloat:
        return "float";
      default:
        return token.text;
    }
  }

  absl::Status ErrorAt(const Token& token, std::string_view message) const {
    return absl::InvalidArgumentError(absl::StrFormat(
        "template syntax error at line %d, column %d: %s", token.line, token.column, message));
  }
  absl::Status Error(std::string_view message) const { return ErrorAt(Current(), message); }

  absl::Status Expect(std::string_view op) {
    if (!IsOperator(op)) {
      return Error(absl::StrFormat("expected '%s', got '%s'", op, Describe(Current())));
    }
    Advance();
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Current().kind != Kind::kBlockEnd) {
      return Error(
          absl::StrFormat("expected end of statement block, got '%s'", Describe(Current())));
    }
    Advance();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Current().kind != Kind::kName) {
      return Error(absl::StrFormat("expected a name, got '%s'", Describe(Current())));
    }
    std::string name = Current().text;
    Advance();
    return name;
  }

  absl::Status EnterNesting() {
    if (++depth_ > kMaxNestingDepth) {
      return Error(absl::StrFormat("nesting deeper than the limit of %d levels", kMaxNestingDepth));
    }
    return absl::OkStatus();
  }

  // Parses statements until one of `end_tags` (a block whose first name is in the list), which is
  // consumed up to its name and returned in `end_tag`; the caller reads the rest of that tag.
  absl::Status ParseBody(const std::vector<std::string>& end_tags, Body& body,
                         std::string& end_tag) {
    if (absl::Status status = EnterNesting(); !status.ok()) return status;
    const Token& opening = Current();
    while (true) {
      const Token& token = Current();
      switch (token.kind) {
        case Kind::kEnd:
          if (!end_tags.empty()) {
            return ErrorAt(opening, absl::StrFormat("unexpected end of template: looking for '%s'",
                                                    absl::StrJoin(end_tags, "' or '")));
          }
          --depth_;
          return absl::OkStatus();
        case Kind::kData: {
          auto statement = MakeStatement(Statement::Kind::kData, token);
          statement->text = token.text;
          body.push_back(std::move(statement));
          Advance();
          break;
        }
        case Kind::kVariableBegin: {
          auto statement = MakeStatement(Statement::Kind::kOutput, token);
          Advance();
          absl::StatusOr<ExpressionPtr> expression = ParseTupleExpression(true);
          if (!expression.ok()) return expression.status();
          statement->expression = std::move(*expression);
          if (Current().kind != Kind::kVariableEnd) {
            return Error(
                absl::StrFormat("expected end of print statement, got '%s'", Describe(Current())));
          }
          Advance();
          body.push_back(std::move(statement));
          break;
        }
        case Kind::kBlockBegin: {
          Advance();
          if (Current().kind != Kind::kName) {
            return Error(
                absl::StrFormat("expected a statement name, got '%s'", Describe(Current())));
          }
          const std::string name = Current().text;
          for (const std::string& end : end_tags) {
            if (name == end) {
              Advance();
              end_tag = name;
              --depth_;
              return absl::OkStatus();
            }
          }
          absl::StatusOr<StatementPtr> statement = ParseStatement();
          if (!statement.ok()) return statement.status();
          body.push_back(std::move(*statement));
          break;
        }
        default:
          return Error(absl::StrFormat("unexpected '%s'", Describe(token)));
      }
    }
  }

  static StatementPtr MakeStatement(Statement::Kind kind, const Token& token) {
    auto statement = std::make_unique<Statement>();
    statement->kind = kind;
    statement->line = token.line;
    statement->column = token.column;
    return statement;
  }

  absl::StatusOr<StatementPtr> ParseStatement() {
    const Token token = Current();
    const std::string& name = token.text;
    Advance();
    if (name == "if") return ParseIf(token);
    if (name == "for") return ParseFor(token);
    if (name == "set") return ParseSet(token);
    if (name == "macro") return ParseMacro(token);
    if (name == "call") return ParseCallBlock(token);
    if (name == "filter") return ParseFilterBlock(token);
    if (name == "break" || name == "continue") {
      auto statement = MakeStatement(
          name == "break" ? Statement::Kind::kBreak : Statement::Kind::kContinue, token);
      if (!in_loop_) return ErrorAt(token, absl::StrFormat("'%s' outside of a for loop", name));
      if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
      return statement;
    }
    if (name == "generation") {
      // transformers' {% generation %} marks assistant text for its token mask; for rendering
      // it is transparent, so its body is spliced in an always-true if.
      auto statement = MakeStatement(Statement::Kind::kIf, token);
      if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
      auto always = std::make_unique<Expression>();
      always->kind = Expression::Kind::kConstant;
      always->value = Value::Bool(true);
      statement->conditions.push_back(std::move(always));
      statement->bodies.emplace_back();
      std::string end_tag;
      if (absl::Status status = ParseBody({"endgeneration"}, statement->bodies.back(), end_tag);
          !status.ok()) {
        return status;
      }
      if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
      return statement;
    }
    return ErrorAt(token, absl::StrFormat("unknown tag '%s'", name));
  }

  absl::StatusOr<StatementPtr> ParseIf(const Token& token) {
    auto statement = MakeStatement(Statement::Kind::kIf, token);
    while (true) {
      absl::StatusOr<ExpressionPtr> condition = ParseTupleExpression(true);
      if (!condition.ok()) return condition.status();
      if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
      statement->conditions.push_back(std::move(*condition));
      statement->bodies.emplace_back();
      std::string end_tag;
      if (absl::Status status =
              ParseBody({"elif", "else", "endif"}, statement->bodies.back(), end_tag);
          !status.ok()) {
        return status;
      }
      if (end_tag == "elif") continue;
      if (end_tag == "else") {
        if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
        statement->bodies.emplace_back();
        if (absl::Status status = ParseBody({"endif"}, statement->bodies.back(), end_tag);
            !status.ok()) {
          return status;
        }
      }
      if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
      return statement;
    }
  }

  absl::StatusOr<std::vector<std::string>> ParseTargets() {
    std::vector<std::string> targets;
    const bool parenthesized = IsOperator("(");
    if (parenthesized) Advance();
    while (true) {
      absl::StatusOr<std::string> name = ExpectName();
      if (!name.ok()) return name.status();
      targets.push_back(std::move(*name));
      if (!IsOperator(",")) break;
      Advance();
      if (Current().kind != Kind::kName) break;  // trailing comma
    }
    if (parenthesized) {
      if (absl::Status status = Expect(")"); !status.ok()) return status;
    }
    return targets;
  }

  absl::StatusOr<StatementPtr> ParseFor(const Token& token) {
    auto statement = MakeStatement(Statement::Kind::kFor, token);
    absl::StatusOr<std::vector<std::string>> targets = ParseTargets();
    if (!targets.ok()) return targets.status();
    statement->targets = std::move(*targets);
    if (!IsName("in")) return Error("expected 'in' in a for statement");
    Advance();
    absl::StatusOr<ExpressionPtr> iterable = ParseTupleExpression(false);
    if (!iterable.ok()) return iterable.status();
    statement->expression = std::move(*iterable);
    if (IsName("if")) {
      Advance();
      absl::StatusOr<ExpressionPtr> condition = ParseExpression(true);
      if (!condition.ok()) return condition.status();
      statement->condition = std::move(*condition);
    }
    if (IsName("recursive")) return Error("recursive for loops are not supported");
    if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
    const bool was_in_loop = in_loop_;
    in_loop_ = true;
    std::string end_tag;
    absl::Status status = ParseBody({"else", "endfor"}, statement->body, end_tag);
    in_loop_ = was_in_loop;
    if (!status.ok()) return status;
    if (end_tag == "else") {
      if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
      if (absl::Status status = ParseBody({"endfor"}, statement->else_body, end_tag);
          !status.ok()) {
        return status;
      }
    }
    if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
    return statement;
  }

  // Parses "| filter(args) | filter ..." over a placeholder name.
  absl::StatusOr<ExpressionPtr> ParseFilterChainOnPlaceholder() {
    auto placeholder = std::make_unique<Expression>();
    placeholder->kind = Expression::Kind::kName;
    placeholder->name = kBodyPlaceholder;
    placeholder->line = Current().line;
    placeholder->column = Current().column;
    ExpressionPtr chain = std::move(placeholder);
    bool first = true;
    while (first || IsOperator("|")) {
      if (IsOperator("|")) Advance();
      first = false;
      absl::StatusOr<ExpressionPtr> filtered = ParseFilter(std::move(chain));
      if (!filtered.ok()) return filtered.status();
      chain = std::move(*filtered);
    }
    return chain;
  }

  absl::StatusOr<StatementPtr> ParseSet(const Token& token) {
    auto statement = MakeStatement(Statement::Kind::kSet, token);
    if (Current().kind == Kind::kName && Peek().kind == Kind::kOperator && Peek().text == ".") {
      statement->targets.push_back(Current().text);
      Advance();
      Advance();
      absl::StatusOr<std::string> attribute = ExpectName();
      if (!attribute.ok()) return attribute.status();
      statement->attribute = std::move(*attribute);
    } else {
      absl::StatusOr<std::vector<std::string>> targets = ParseTargets();
      if (!targets.ok()) return targets.status();
      statement->targets = std::move(*targets);
    }
    if (IsOperator("=")) {
      Advance();
      absl::StatusOr<ExpressionPtr> value = ParseTupleExpression(true);
      if (!value.ok()) return value.status();
      statement->expression = std::move(*value);
      if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
      return statement;
    }
    // Block set: {% set name %}...{% endset %}, optionally {% set name | filter %}.
    statement->kind = Statement::Kind::kSetBlock;
    if (!statement->attribute.empty() || statement->targets.size() != 1) {
      return Error("a block set assigns exactly one name");
    }
    if (IsOperator("|")) {
      Advance();
      absl::StatusOr<ExpressionPtr> chain = ParseFilterChainOnPlaceholder();
      if (!chain.ok()) return chain.status();
      statement->expression = std::move(*chain);
    }
    if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
    std::string end_tag;
    if (absl::Status status = ParseBody({"endset"}, statement->body, end_tag); !status.ok()) {
      return status;
    }
    if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
    return statement;
  }

  absl::Status ParseParameters(std::vector<MacroParameter>& parameters) {
    if (absl::Status status = Expect("("); !status.ok()) return status;
    while (!IsOperator(")")) {
      if (!parameters.empty()) {
        if (absl::Status status = Expect(","); !status.ok()) return status;
        if (IsOperator(")")) break;
      }
      absl::StatusOr<std::string> name = ExpectName();
      if (!name.ok()) return name.status();
      MacroParameter parameter;
      parameter.name = std::move(*name);
      if (IsOperator("=")) {
        Advance();
        absl::StatusOr<ExpressionPtr> value = ParseExpression(true);
        if (!value.ok()) return value.status();
        parameter.default_value = std::move(*value);
      } else {
        for (const MacroParameter& previous : parameters) {
          if (previous.default_value) return Error("non-default argument follows default argument");
        }
      }
      parameters.push_back(std::move(parameter));
    }
    Advance();
    return absl::OkStatus();
  }

  absl::StatusOr<StatementPtr> ParseMacro(const Token& token) {
    auto statement = MakeStatement(Statement::Kind::kMacro, token);
    absl::StatusOr<std::string> name = ExpectName();
    if (!name.ok()) return name.status();
    statement->name = std::move(*name);
    if (absl::Status status = ParseParameters(statement->parameters); !status.ok()) return status;
    if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
    const bool was_in_loop = in_loop_;
    in_loop_ = false;
    std::string end_tag;
    absl::Status status = ParseBody({"endmacro"}, statement->body, end_tag);
    in_loop_ = was_in_loop;
    if (!status.ok()) return status;
    if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
    return statement;
  }

  absl::StatusOr<StatementPtr> ParseCallBlock(const Token& token) {
    auto statement = MakeStatement(Statement::Kind::kCallBlock, token);
    if (IsOperator("(")) {
      if (absl::Status status = ParseParameters(statement->parameters); !status.ok()) {
        return status;
      }
    }
    absl::StatusOr<ExpressionPtr> call = ParseExpression(true);
    if (!call.ok()) return call.status();
    if ((*call)->kind != Expression::Kind::kCall) return Error("expected a call in a call block");
    statement->expression = std::move(*call);
    if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
    const bool was_in_loop = in_loop_;
    in_loop_ = false;
    std::string end_tag;
    absl::Status status = ParseBody({"endcall"}, statement->body, end_tag);
    in_loop_ = was_in_loop;
    if (!status.ok()) return status;
    if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
    return statement;
  }

  absl::StatusOr<StatementPtr> ParseFilterBlock(const Token& token) {
    auto statement = MakeStatement(Statement::Kind::kFilterBlock, token);
    absl::StatusOr<ExpressionPtr> chain = ParseFilterChainOnPlaceholder();
    if (!chain.ok()) return chain.status();
    statement->expression = std::move(*chain);
    if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
    std::string end_tag;
    if (absl::Status status = ParseBody({"endfilter"}, statement->body, end_tag); !status.ok()) {
      return status;
    }
    if (absl::Status status = ExpectBlockEnd(); !status.ok()) return status;
    return statement;
  }

  // ---- Expressions, in jinja2's precedence order (lowest first). ----

  ExpressionPtr MakeExpression(Expression::Kind kind, const Token& token) {
    auto expression = std::make_unique<Expression>();
    expression->kind = kind;
    expression->line = token.line;
    expression->column = token.column;
    return expression;
  }

  // A bare "a, b" is a tuple (jinja2's parse_tuple) in output, if, for and set.
  absl::StatusOr<ExpressionPtr> ParseTupleExpression(bool with_condition) {
    const Token start = Current();
    absl::StatusOr<ExpressionPtr> first = ParseExpression(with_condition);
    if (!first.ok()) return first.status();
    if (!IsOperator(",")) return first;
    auto tuple = MakeExpression(Expression::Kind::kTuple, start);
    tuple->operands.push_back(std::move(*first));
    while (IsOperator(",")) {
      Advance();
      if (Current().kind == Kind::kBlockEnd || Current().kind == Kind::kVariableEnd ||
          IsName("in") || IsName("if")) {
        break;
      }
      absl::StatusOr<ExpressionPtr> next = ParseExpression(with_condition);
      if (!next.ok()) return next.status();
      tuple->operands.push_back(std::move(*next));
    }
    return tuple;
  }

  absl::StatusOr<ExpressionPtr> ParseExpression(bool with_condition) {
    if (absl::Status status = EnterNesting(); !status.ok()) return status;
    absl::StatusOr<ExpressionPtr> result = with_condition ? ParseConditional() : ParseOr();
    --depth_;
    return result;
  }

  absl::StatusOr<ExpressionPtr> ParseConditional() {
    absl::StatusOr<ExpressionPtr> value = ParseOr();
    if (!value.ok()) return value.status();
    ExpressionPtr result = std::move(*value);
    while (IsName("if")) {
      const Token token = Current();
      Advance();
      absl::StatusOr<ExpressionPtr> condition = ParseOr();
      if (!condition.ok()) return condition.status();
      auto conditional = MakeExpression(Expression::Kind::kConditional, token);
      conditional->operands.push_back(std::move(*condition));
      conditional->operands.push_back(std::move(result));
      if (IsName("else")) {
        Advance();
        absl::StatusOr<ExpressionPtr> otherwise = ParseConditional();
        if (!otherwise.ok()) return otherwise.status();
        conditional->operands.push_back(std::move(*otherwise));
      } else {
        conditional->operands.push_back(nullptr);
      }
      result = std::move(conditional);
    }
    return result;
  }

  absl::StatusOr<ExpressionPtr> MakeBinary(std::string op, ExpressionPtr left, ExpressionPtr right,
                                           const Token& token) {
    auto binary = MakeExpression(Expression::Kind::kBinary, token);
    binary->name = std::move(op);
    binary->operands.push_back(std::move(left));
    binary->operands.push_back(std::move(right));
    return binary;
  }

  absl::StatusOr<ExpressionPtr> ParseOr() {
    absl::StatusOr<ExpressionPtr> left = ParseAnd();
    if (!left.ok()) return left.status();
    ExpressionPtr result = std::move(*left);
    while (IsName("or")) {
      const Token token = Current();
      Advance();
      absl::StatusOr<ExpressionPtr> right = ParseAnd();
      if (!right.ok()) return right.status();
      result = *MakeBinary("or", std::move(result), std::move(*right), token);
    }
    return result;
  }

  absl::StatusOr<ExpressionPtr> ParseAnd() {
    absl::StatusOr<ExpressionPtr> left = ParseNot();
    if (!left.ok()) return left.status();
    ExpressionPtr result = std::move(*left);
    while (IsName("and")) {
      const Token token = Current();
      Advance();
      absl::StatusOr<ExpressionPtr> right = ParseNot();
      if (!right.ok()) return right.status();
      result = *MakeBinary("and", std::move(result), std::move(*right), token);
    }
    return result;
  }

  absl::StatusOr<ExpressionPtr> ParseNot() {
    if (IsName("not")) {
      const Token token = Current();
      Advance();
      if (absl::Status status = EnterNesting(); !status.ok()) return status;
      absl::StatusOr<ExpressionPtr> operand = ParseNot();
      --depth_;
      if (!operand.ok()) return operand.status();
      auto unary = MakeExpression(Expression::Kind::kUnary, token);
      unary->name = "not";
      unary->operands.push_back(std::move(*operand));
      return unary;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExpressionPtr> ParseCompare() {
    const Token start = Current();
    absl::StatusOr<ExpressionPtr> left = ParseMath1();
    if (!left.ok()) return left.status();
    ExpressionPtr compare;
    while (true) {
      std::string op;
      if (Current().kind == Kind::kOperator &&
          (Current().text == "==" || Current().text == "!=" || Current().text == "<" ||
           Current().text == "<=" || Current().text == ">" || Current().text == ">=")) {
        op = Current().text;
        Advance();
      } else if (IsName("in")) {
        op = "in";
        Advance();
      } else if (IsName("not") && Peek().kind == Kind::kName && Peek().text == "in") {
        op = "not in";
        Advance();
        Advance();
      } else {
        break;
      }
      absl::StatusOr<ExpressionPtr> right = ParseMath1();
      if (!right.ok()) return right.status();
      if (!compare) {
        compare = MakeExpression(Expression::Kind::kCompare, start);
        compare->operands.push_back(std::move(*left));
      }
      compare->compare_ops.push_back(std::move(op));
      compare->operands.push_back(std::move(*right));
    }
    if (compare) return compare;
    return left;
  }

  absl::StatusOr<ExpressionPtr> ParseMath1() {
    absl::StatusOr<ExpressionPtr> left = ParseConcat();
    if (!left.ok()) return left.status();
    ExpressionPtr result = std::move(*left);
    while (IsOperator("+") || IsOperator("-")) {
      const Token token = Current();
      Advance();
      absl::StatusOr<ExpressionPtr> right = ParseConcat();
      if (!right.ok()) return right.status();
      result = *MakeBinary(token.text, std::move(result), std::move(*right), token);
    }
    return result;
  }

  absl::StatusOr<ExpressionPtr> ParseConcat() {
    absl::StatusOr<ExpressionPtr> left = ParseMath2();
    if (!left.ok()) return left.status();
    ExpressionPtr result = std::move(*left);
    while (IsOperator("~")) {
      const Token token = Current();
      Advance();
      absl::StatusOr<ExpressionPtr> right = ParseMath2();
      if (!right.ok()) return right.status();
      result = *MakeBinary("~", std::move(result), std::move(*right), token);
    }
    return result;
  }

  absl::StatusOr<ExpressionPtr> ParseMath2() {
    absl::StatusOr<ExpressionPtr> left = ParsePow();
    if (!left.ok()) return left.status();
    ExpressionPtr result = std::move(*left);
    while (IsOperator("*") || IsOperator("/") || IsOperator("//") || IsOperator("%")) {
      const Token token = Current();
      Advance();
      absl::StatusOr<ExpressionPtr> right = ParsePow();
      if (!right.ok()) return right.status();
      result = *MakeBinary(token.text, std::move(result), std::move(*right), token);
    }
    return result;
  }

  absl::StatusOr<ExpressionPtr> ParsePow() {
    absl::StatusOr<ExpressionPtr> left = ParseUnary(true);
    if (!left.ok()) return left.status();
    ExpressionPtr result = std::move(*left);
    while (IsOperator("**")) {
      const Token token = Current();
      Advance();
      absl::StatusOr<ExpressionPtr> right = ParseUnary(true);
      if (!right.ok()) return right.status();
      result = *MakeBinary("**", std::move(result), std::move(*right), token);
    }
    return result;
  }

  absl::StatusOr<ExpressionPtr> ParseUnary(bool with_filter) {
    if (absl::Status status = EnterNesting(); !status.ok()) return status;
    ExpressionPtr node;
    if (IsOperator("-") || IsOperator("+")) {
      const Token token = Current();
      Advance();
      absl::StatusOr<ExpressionPtr> operand = ParseUnary(false);
      if (!operand.ok()) return operand.status();
      node = MakeExpression(Expression::Kind::kUnary, token);
      node->name = token.text;
      node->operands.push_back(std::move(*operand));
    } else {
      absl::StatusOr<ExpressionPtr> primary = ParsePrimary();
      if (!primary.ok()) return primary.status();
      node = std::move(*primary);
    }
    absl::StatusOr<ExpressionPtr> postfix = ParsePostfix(std::move(node));
    if (!postfix.ok()) return postfix.status();
    node = std::move(*postfix);
    if (with_filter) {
      absl::StatusOr<ExpressionPtr> filtered = ParseFilterExpression(std::move(node));
      if (!filtered.ok()) return filtered.status();
      node = std::move(*filtered);
    }
    --depth_;
    return node;
  }

  absl::StatusOr<ExpressionPtr> ParsePrimary() {
    const Token token = Current();
    switch (token.kind) {
      case Kind::kName: {
        Advance();
        if (token.text == "true" || token.text == "True") return Constant(Value::Bool(true), token);
        if (token.text == "false" || token.text == "False") {
          return Constant(Value::Bool(false), token);
        }
        if (token.text == "none" || token.text == "None") return Constant(Value::None(), token);
        auto name = MakeExpression(Expression::Kind::kName, token);
        name->name = token.text;
        return name;
      }
      case Kind::kString: {
        // Adjacent string literals concatenate, as in Python.
        std::string text;
        while (Current().kind == Kind::kString) {
          text += Current().text;
          Advance();
        }
        return Constant(Value::String(std::move(text)), token);
      }
      case Kind::kInteger: {
        Advance();
        int64_t number;
        if (!absl::SimpleAtoi(token.text, &number)) {
          return ErrorAt(token,
                         absl::StrFormat("integer literal %s does not fit in 64 bits", token.text));
        }
        return Constant(Value::Int(number), token);
      }
      case Kind::kFloat: {
        Advance();
        errno = 0;
        const double number = std::strtod(token.text.c_str(), nullptr);
        return Constant(Value::Float(number), token);
      }
      case Kind::kOperator:
        if (token.text == "(") {
          Advance();
          if (IsOperator(")")) {
            Advance();
            return MakeExpression(Expression::Kind::kTuple, token);
          }
          absl::StatusOr<ExpressionPtr> inner = ParseExpression(true);
          if (!inner.ok()) return inner.status();
          if (IsOperator(")")) {
            Advance();
            return inner;
          }
          auto tuple = MakeExpression(Expression::Kind::kTuple, token);
          tuple->operands.push_back(std::move(*inner));
          while (IsOperator(",")) {
            Advance();
            if (IsOperator(")")) break;
            absl::StatusOr<ExpressionPtr> next = ParseExpression(true);
            if (!next.ok()) return next.status();
            tuple->operands.push_back(std::move(*next));
          }
          if (absl::Status status = Expect(")"); !status.ok()) return status;
          return tuple;
        }
        if (token.text == "[") {
          Advance();
          auto list = MakeExpression(Expression::Kind::kList, token);
          while (!IsOperator("]")) {
            if (!list->operands.empty()) {
              if (absl::Status status = Expect(","); !status.ok()) return status;
              if (IsOperator("]")) break;
            }
            absl::StatusOr<ExpressionPtr> item = ParseExpression(true);
            if (!item.ok()) return item.status();
            list->operands.push_back(std::move(*item));
          }
          Advance();
          return list;
        }
        if (token.text == "{") {
          Advance();
          auto dict = MakeExpression(Expression::Kind::kDict, token);
          while (!IsOperator("}")) {
            if (!dict->operands.empty()) {
              if (absl::Status status = Expect(","); !status.ok()) return status;
              if (IsOperator("}")) break;
            }
            absl::StatusOr<ExpressionPtr> key = ParseExpression(true);
            if (!key.ok()) return key.status();
            if (absl::Status status = Expect(":"); !status.ok()) return status;
            absl::StatusOr<ExpressionPtr> value = ParseExpression(true);
            if (!value.ok()) return value.status();
            dict->operands.push_back(std::move(*key));
            dict->operands.push_back(std::move(*value));
          }
          Advance();
          return dict;
        }
        break;
      default:
        break;
    }
    return Error(absl::StrFormat("unexpected '%s'", Describe(token)));
  }

  ExpressionPtr Constant(Value value, const Token& token) {
    auto constant = MakeExpression(Expression::Kind::kConstant, token);
    constant->value = std::move(value);
    return constant;
  }

  absl::StatusOr<ExpressionPtr> ParsePostfix(ExpressionPtr node) {
    while (true) {
      const Token token = Current();
      if (IsOperator(".")) {
        Advance();
        auto attribute = MakeExpression(Expression::Kind::kAttribute, token);
        if (Current().kind == Kind::kName) {
          attribute->name = Current().text;
        } else if (Current().kind == Kind::kInteger) {
          // "x.0" is x[0] in jinja2.
          attribute->kind = Expression::Kind::kItem;
          int64_t index = 0;
          absl::SimpleAtoi(Current().text, &index);
          attribute->operands.push_back(std::move(node));
          attribute->operands.push_back(Constant(Value::Int(index), Current()));
          Advance();
          node = std::move(attribute);
          continue;
        } else {
          return Error(
              absl::StrFormat("expected an attribute name, got '%s'", Describe(Current())));
        }
        Advance();
        attribute->operands.push_back(std::move(node));
        node = std::move(attribute);
      } else if (IsOperator("[")) {
        Advance();
        absl::StatusOr<ExpressionPtr> subscript = ParseSubscript(std::move(node), token);
        if (!subscript.ok()) return subscript.status();
        node = std::move(*subscript);
      } else if (IsOperator("(")) {
        absl::StatusOr<ExpressionPtr> call = ParseCall(std::move(node), token);
        if (!call.ok()) return call.status();
        node = std::move(*call);
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExpressionPtr> ParseSubscript(ExpressionPtr node, const Token& token) {
    ExpressionPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (true) {
      if (IsOperator(":")) {
        is_slice = true;
        if (++part > 2) return Error("a slice has at most three parts");
        Advance();
        continue;
      }
      if (IsOperator("]")) break;
      if (parts[part]) return Error("expected ':' or ']' in a subscript");
      absl::StatusOr<ExpressionPtr> value = ParseExpression(true);
      if (!value.ok()) return value.status();
      parts[part] = std::move(*value);
    }
    Advance();
    if (!is_slice) {
      if (!parts[0]) return ErrorAt(token, "empty subscript");
      auto item = MakeExpression(Expression::Kind::kItem, token);
      item->operands.push_back(std::move(node));
      item->operands.push_back(std::move(parts[0]));
      return item;
    }
    auto slice = MakeExpression(Expression::Kind::kSlice, token);
    slice->operands.push_back(std::move(node));
    for (ExpressionPtr& value : parts) slice->operands.push_back(std::move(value));
    return slice;
  }

  absl::Status ParseArguments(Expression& call) {
    if (absl::Status status = Expect("("); !status.ok()) return status;
    while (!IsOperator(")")) {
      if (!call.arguments.empty() || !call.keywords.empty()) {
        if (absl::Status status = Expect(","); !status.ok()) return status;
        if (IsOperator(")")) break;
      }
      if (Current().kind == Kind::kName && Peek().kind == Kind::kOperator && Peek().text == "=") {
        KeywordArgument keyword;
        keyword.name = Current().text;
        Advance();
        Advance();
        absl::StatusOr<ExpressionPtr> value = ParseExpression(true);
        if (!value.ok()) return value.status();
        keyword.value = std::move(*value);
        call.keywords.push_back(std::move(keyword));
      } else {
        if (!call.keywords.empty()) return Error("positional argument follows keyword argument");
        absl::StatusOr<ExpressionPtr> value = ParseExpression(true);
        if (!value.ok()) return value.status();
        call.arguments.push_back(std::move(*value));
      }
    }
    Advance();
    return absl::OkStatus();
  }

  absl::StatusOr<ExpressionPtr> ParseCall(ExpressionPtr callee, const Token& token) {
    auto call = MakeExpression(Expression::Kind::kCall, token);
    call->operands.push_back(std::move(callee));
    if (absl::Status status = ParseArguments(*call); !status.ok()) return status;
    return call;
  }

  absl::StatusOr<ExpressionPtr> ParseFilter(ExpressionPtr node) {
    const Token token = Current();
    absl::StatusOr<std::string> name = ExpectName();
    if (!name.ok()) return name.status();
    auto filter = MakeExpression(Expression::Kind::kFilter, token);
    filter->name = std::move(*name);
    filter->operands.push_back(std::move(node));
    if (IsOperator("(")) {
      if (absl::Status status = ParseArguments(*filter); !status.ok()) return status;
    }
    return filter;
  }

  absl::StatusOr<ExpressionPtr> ParseFilterExpression(ExpressionPtr node) {
    while (true) {
      if (IsOperator("|")) {
        Advance();
        absl::StatusOr<ExpressionPtr> filtered = ParseFilter(std::move(node));
        if (!filtered.ok()) return filtered.status();
        node = std::move(*filtered);
      } else if (IsName("is")) {
        const Token token = Current();
        Advance();
        auto test = MakeExpression(Expression::Kind::kTest, token);
        if (IsName("not")) {
          test->negated = true;
          Advance();
        }
        absl::StatusOr<std::string> name = ExpectName();
        if (!name.ok()) return name.status();
        test->name = std::move(*name);
        test->operands.push_back(std::move(node));
        if (IsOperator("(")) {
          if (absl::Status status = ParseArguments(*test); !status.ok()) return status;
        } else if ((Current().kind == Kind::kName || Current().kind == Kind::kString ||
                    Current().kind == Kind::kInteger || Current().kind == Kind::kFloat ||
                    IsOperator("(") || IsOperator("[") || IsOperator("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          // "x is divisibleby 3", "x is sameas none": one argument without parentheses.
          if (IsName("is")) return Error("tests cannot be chained with 'is'");
          absl::StatusOr<ExpressionPtr> argument = ParsePrimary();
          if (!argument.ok()) return argument.status();
          absl::StatusOr<ExpressionPtr> postfix = ParsePostfix(std::move(*argument));
          if (!postfix.ok()) return postfix.status();
          test->arguments.push_back(std::move(*postfix));
        }
        node = std::move(test);
      } else if (IsOperator("(")) {
        absl::StatusOr<ExpressionPtr> call = ParseCall(std::move(node), Current());
        if (!call.ok()) return call.status();
        node = std::move(*call);
      } else {
        return node;
      }
    }
  }

  const std::vector<Token>& tokens_;
  size_t position_ = 0;
  int depth_ = 0;
  bool in_loop_ = false;
};

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens) {
  if (tokens.empty() || tokens.back().kind != Token::Kind::kEnd) {
    return absl::InvalidArgumentError("template parser: token list does not end with kEnd");
  }
  return Parser(tokens).ParseTemplate();
}

}  // namespace llmrt::jinja
