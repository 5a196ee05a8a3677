// The architecture registry: one line per family file under families/.
#include "absl/strings/str_join.h"
#include "compiler/arch/family.h"

namespace llmc {

extern const Family kLlamaFamily;
extern const Family kMistralFamily;
extern const Family kQwen2Family;
extern const Family kQwen3Family;
extern const Family kSmolLM3Family;
extern const Family kOlmo2Family;
extern const Family kPhi3Family;
extern const Family kGemma2Family;
extern const Family kGemma3Family;
extern const Family kQwen3MoeFamily;
extern const Family kQwen2MoeFamily;
extern const Family kMixtralFamily;
extern const Family kGptOssFamily;

namespace {

// The "supported: ..." lists keep Gemma 2 and 3 last (hf_config_test checks the list's ends).
constexpr const Family* kFamilies[] = {
    &kLlamaFamily,  &kMistralFamily, &kQwen2Family,    &kQwen3Family,    &kSmolLM3Family,
    &kOlmo2Family,  &kPhi3Family,    &kQwen3MoeFamily, &kQwen2MoeFamily, &kMixtralFamily,
    &kGptOssFamily, &kGemma2Family,  &kGemma3Family};

}  // namespace

const Family* FindFamily(std::string_view architecture) {
  for (const Family* family : kFamilies) {
    if (architecture == family->architecture) return family;
  }
  return nullptr;
}

std::string SupportedArchitectures() {
  return absl::StrJoin(kFamilies, ", ", [](std::string* out, const Family* family) {
    out->append(family->architecture);
  });
}

}  // namespace llmc
