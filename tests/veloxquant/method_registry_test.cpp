// The method registry: the standalone set is exactly the original's five (spec §4.4), every
// descriptor is complete, field defaults come from the config struct, and the JSON contract of
// `veloxquant methods` (schema_version 1) carries what the original's apps decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>

#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

TEST(MethodRegistry, StandaloneSetIsExactlyTheOriginalFive) {
  const std::set<std::string> expected = {"turboquant_prod", "turboquant_mse", "polar", "qjl", "spectral"};
  EXPECT_EQ(std::set<std::string>(STANDALONE_METHODS.begin(), STANDALONE_METHODS.end()), expected);
  std::set<std::string> registry_standalone;
  for (const MethodDescriptor& m : method_registry()) {
    if (!m.is_servable) registry_standalone.insert(m.name);
    EXPECT_EQ(is_standalone_method(m.name), !m.is_servable) << m.name;
  }
  EXPECT_EQ(registry_standalone, expected);
}

TEST(MethodRegistry, DefaultMethodIsServable) {
  const MethodDescriptor* m = find_method(KVCacheConfig{}.method);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->is_servable);  // the original's test_default_method_is_serving_compatible
}

TEST(MethodRegistry, EveryDescriptorIsComplete) {
  for (const MethodDescriptor& m : method_registry()) {
    SCOPED_TRACE(m.name);
    EXPECT_FALSE(m.paper.empty());
    EXPECT_FALSE(m.blurb.empty());
    EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::path(VQ_SOURCE_DIR) / m.docs))
        << "the method card " << m.docs << " does not exist";
    EXPECT_TRUE(m.family == "quantization" || m.family == "eviction" || m.family == "hybrid");
    EXPECT_EQ(static_cast<bool>(m.make_serving), m.is_servable);
    EXPECT_EQ(static_cast<bool>(m.make_standalone), !m.is_servable);
    for (const std::string& g : m.generic_fields) EXPECT_NE(find_generic_field(g), nullptr) << g;
    for (const FieldSpec& f : m.fields) {
      EXPECT_EQ(find_field(f.name), &f) << "field names are unique across methods: " << f.name;
      EXPECT_TRUE(field_relevant_to(m, f.name));
    }
  }
}

// The one registration carries the prompt-cache restore: every servable method names the type its
// caches report, and the placeholder it makes reports that type (integration/prompt_cache_types).
TEST(MethodRegistry, EveryServableMethodRegistersItsRestoreFactory) {
  for (const MethodDescriptor& m : method_registry()) {
    SCOPED_TRACE(m.name);
    if (!m.is_servable) {
      EXPECT_FALSE(m.make_restorable);
      continue;
    }
    ASSERT_TRUE(m.make_restorable);
    EXPECT_EQ(m.make_restorable()->type_name(), m.cache_type_name);
    KVCacheConfig c;
    c.method = m.name;
    c.head_dim = 32;
    c.bit_width_inlier = 4;
    EXPECT_EQ(m.make_serving(c)->type_name(), m.cache_type_name);
  }
}

// Eviction methods set their budget through the registration; the result validates and keeps
// that many rows.
TEST(MethodRegistry, EveryEvictionMethodSetsItsBudget) {
  for (const MethodDescriptor& m : method_registry()) {
    SCOPED_TRACE(m.name);
    EXPECT_EQ(static_cast<bool>(m.set_budget), m.family == "eviction");
    if (!m.set_budget) continue;
    for (int budget : {8, 32, 256}) {
      KVCacheConfig c;
      c.method = m.name;
      m.set_budget(c, budget);
      EXPECT_NO_THROW(m.validate(c));
      auto cache = std::dynamic_pointer_cast<eviction::EvictionCache>(m.make_serving(c));
      ASSERT_NE(cache, nullptr);
      EXPECT_EQ(cache->policy().budget, budget);
    }
  }
}

TEST(MethodRegistry, OrderIsServableFirstThenByName) {
  const auto& rows = method_registry();
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const auto& a = rows[i - 1];
    const auto& b = rows[i];
    EXPECT_TRUE(a.is_servable > b.is_servable || (a.is_servable == b.is_servable && a.name < b.name))
        << a.name << " before " << b.name;
  }
}

TEST(MethodRegistry, FieldDefaultsFollowTheConfigStruct) {
  const FieldSpec* group = find_field("kivi_group_size");
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(std::get<int64_t>(group->default_value()), 32);
  KVCacheConfig c;
  group->set(c, int64_t{64});
  EXPECT_EQ(c.kivi.kivi_group_size, 64);
  EXPECT_EQ(std::get<int64_t>(group->get(c)), 64);
  EXPECT_EQ(std::get<int64_t>(find_field("residual_length")->default_value()), 128);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(find_field("jl_dim")->default_value()));
}

TEST(MethodsReport, JsonContract) {
  const nlohmann::json j = methods_json({});
  EXPECT_EQ(j.at("schema_version"), 1);
  EXPECT_EQ(j.at("default_serve_method"), "turboquant_rvq");
  ASSERT_EQ(j.at("methods").size(), method_registry().size());
  const auto& methods = j.at("methods");
  const auto kivi = std::find_if(methods.begin(), methods.end(), [](const auto& m) { return m["name"] == "kivi"; });
  ASSERT_NE(kivi, methods.end());
  EXPECT_EQ((*kivi)["family"], "quantization");
  EXPECT_EQ((*kivi)["is_servable"], true);
  EXPECT_EQ((*kivi)["trimmable"], true);
  bool saw_group = false;
  for (const auto& f : (*kivi)["fields"]) {
    if (f["name"] == "kivi_group_size") {
      saw_group = true;
      EXPECT_EQ(f["default"], 32);
      EXPECT_EQ(f["type"], "int");
    }
  }
  EXPECT_TRUE(saw_group);
  const auto rvq =
      std::find_if(methods.begin(), methods.end(), [](const auto& m) { return m["name"] == "turboquant_rvq"; });
  ASSERT_NE(rvq, methods.end());
  EXPECT_EQ((*rvq)["fused_attention"], true);
  EXPECT_NE((*rvq)["paper"].get<std::string>().find("2504.19874"), std::string::npos);
}

TEST(MethodsReport, Filters) {
  const nlohmann::json servable = methods_json(MethodFilter{.servable_only = true, .family = std::nullopt});
  for (const auto& m : servable.at("methods")) EXPECT_TRUE(m.at("is_servable").get<bool>());
  EXPECT_EQ(servable.at("methods").size(), servable_method_names().size());
  std::set<std::string> eviction;
  const nlohmann::json eviction_rows = methods_json({.family = "eviction"});
  for (const auto& m : eviction_rows.at("methods")) eviction.insert(m.at("name").get<std::string>());
  std::set<std::string> registered;
  for (const MethodDescriptor& m : method_registry()) {
    if (m.family == "eviction") registered.insert(m.name);
  }
  EXPECT_EQ(eviction, registered);
  for (const char* name : {"h2o", "pyramidkv", "snapkv", "streaming_llm", "tova"}) EXPECT_EQ(eviction.count(name), 1u);
  EXPECT_THROW(methods_json({.family = "vibes"}), QuantizerConfigError);
  const std::string text = methods_text({});
  EXPECT_NE(text.find("✗ qjl"), std::string::npos);
  EXPECT_NE(text.find("--set kivi_group_size=32"), std::string::npos);
}

}  // namespace
}  // namespace veloxquant
