// KVCacheConfig defaults (spec §3.1/§3.2), validation order and messages (spec §3.4), and the
// --set parsing rules (spec §8) driven by the field declarations.
#include <gtest/gtest.h>

#include <string>

#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

// The message of the QuantizerConfigError `fn` throws ("" when it does not throw).
template <class F>
std::string config_error(F&& fn) {
  try {
    fn();
  } catch (const QuantizerConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(KVCacheConfig, DefaultsAreTheOriginals) {
  const KVCacheConfig c;
  EXPECT_EQ(c.method, "turboquant_rvq");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FALSE(c.bit_width_inlier.is_list());
  EXPECT_EQ(c.bit_width_inlier.scalar(), 2);
  EXPECT_EQ(c.seed, 42);
  EXPECT_FALSE(c.bit_width_outlier.has_value());
  EXPECT_FALSE(c.jl_dim.has_value());
  EXPECT_FALSE(c.n_outlier_channels.has_value());
  EXPECT_FALSE(c.n_calib_tokens.has_value());
  EXPECT_TRUE(c.enable_vectorized_attend);
  EXPECT_FALSE(c.enable_outlier_two_stream);
  EXPECT_EQ(c.kivi.kivi_group_size, 32);
  EXPECT_EQ(c.kivi.residual_length, 128);
  EXPECT_EQ(c.spectral.spectral_key_d_eff, 4);
  EXPECT_TRUE(c.spectral.spectral_apply_qjl);
  EXPECT_EQ(c.spectral.spectral_model_name, "model");
  EXPECT_EQ(c.turboquant_rvq.rvq_value_bits, 0);
  EXPECT_EQ(c.to_string(), "KVCacheConfig(method='turboquant_rvq', d=128, b=2, seed=42)");
}

TEST(KVCacheConfig, BitWidthAssignsFromIntAndList) {
  KVCacheConfig c;
  c.bit_width_inlier = 4;
  EXPECT_EQ(c.bit_width_inlier.scalar(), 4);
  c.bit_width_inlier = std::vector<int>{2, 3, 4};
  ASSERT_TRUE(c.bit_width_inlier.is_list());
  EXPECT_EQ(c.bit_width_inlier.for_attention_layer(2), 4);
  EXPECT_EQ(c.bit_width_inlier.to_string(), "[2, 3, 4]");
}

TEST(KVCacheConfig, QuantizerConfigErrorIsInvalidArgument) {
  EXPECT_THROW(KVCacheBuilder().with_method("nope").build(), std::invalid_argument);
}

TEST(KVCacheConfigValidation, BuildChecksInTheSpecOrder) {
  // Every field is wrong at once; each fix reveals the next check (spec §3.4 order 1..5).
  KVCacheConfig c;
  c.head_dim = 96;
  c.bit_width_inlier = 0;
  c.jl_dim = 500;
  c.n_outlier_channels = 500;
  c.n_calib_tokens = 0;
  EXPECT_EQ(config_error([&] { validate_for_build(c); }), "head_dim must be a power of two >= 1, got 96");
  c.head_dim = 64;
  EXPECT_EQ(config_error([&] { validate_for_build(c); }), "bit_width_inlier must be >= 1, got 0");
  c.bit_width_inlier = std::vector<int>{};
  EXPECT_EQ(config_error([&] { validate_for_build(c); }), "bit_width_inlier list must be non-empty, got []");
  c.bit_width_inlier = std::vector<int>{2, 0};
  EXPECT_NE(config_error([&] { validate_for_build(c); }).find("[2, 0]"), std::string::npos);
  c.bit_width_inlier = 2;
  EXPECT_EQ(config_error([&] { validate_for_build(c); }), "jl_dim must be <= head_dim (64), got 500");
  c.jl_dim = 64;
  EXPECT_EQ(config_error([&] { validate_for_build(c); }), "n_outlier_channels must be < head_dim (64), got 500");
  c.n_outlier_channels = 63;
  EXPECT_EQ(config_error([&] { validate_for_build(c); }), "n_calib_tokens must be >= 1, got 0");
  c.n_calib_tokens = 1;
  EXPECT_EQ(config_error([&] { validate_for_build(c); }), "");
}

TEST(KVCacheConfigValidation, UnknownMethodListsEveryValidName) {
  KVCacheConfig c;
  c.method = "turboquant_rvqq";
  const std::string message = config_error([&] { validate_for_build(c); });
  EXPECT_NE(message.find("unknown method 'turboquant_rvqq'"), std::string::npos);
  for (const std::string& name : all_method_names()) {
    EXPECT_NE(message.find(name), std::string::npos) << name << " missing from: " << message;
  }
}

TEST(KVCacheConfigValidation, FactoryRules) {
  KVCacheConfig c;
  c.bit_width_inlier = std::vector<int>{2, 2};
  EXPECT_NE(config_error([&] { validate_for_create(c); }).find("list-form"), std::string::npos);
  c = KVCacheConfig{};
  c.sliding_window = 64;
  EXPECT_NE(config_error([&] { validate_for_create(c); }).find("sliding_window=64"), std::string::npos);
  c.method = "spectral";  // standalone methods may have a window
  EXPECT_EQ(config_error([&] { validate_for_create(c); }), "");
  // The factory does not run the power-of-two rule (spec §3.4 note): for_model may meet d = 96.
  c = KVCacheConfig{};
  c.head_dim = 96;
  EXPECT_EQ(config_error([&] { validate_for_create(c); }), "");
}

TEST(KVCacheConfigValidation, MethodOptionBoundsNameFieldAndValue) {
  KVCacheConfig c;
  c.turboquant_rvq.rvq_value_bits = 9;
  EXPECT_EQ(config_error([&] { validate_for_create(c); }), "rvq_value_bits must lie in [0, 8], got 9");
  c.turboquant_rvq.rvq_value_bits = 1;
  EXPECT_EQ(config_error([&] { validate_for_create(c); }), "rvq_value_bits must be 0 (keep dtype) or 2..8, got 1");
  c = KVCacheConfig{};
  c.method = "kivi";
  c.kivi.kivi_group_size = 0;
  EXPECT_EQ(config_error([&] { validate_for_create(c); }), "kivi_group_size must lie in [1, 4096], got 0");
  c.kivi.kivi_group_size = 32;
  c.bit_width_inlier = 9;
  EXPECT_EQ(config_error([&] { validate_for_create(c); }), "bit_width_inlier for 'kivi' must lie in [1, 8], got 9");
}

TEST(KVCacheConfigValidation, SinksPlusGraceNearIntMaxIsRefusedNotWrapped) {
  // 4 + 2147483647 overflowed int and wrapped negative: the check passed and the cache ran.
  KVCacheConfig c;
  c.method = "h2o";
  ASSERT_FALSE(apply_field_assignment(c, "h2o_grace=2147483647").has_value());
  EXPECT_NE(config_error([&] { validate_for_create(c); }).find("sinks and grace would leave nothing evictable"),
            std::string::npos);
}

TEST(FieldAssignment, ParsesByDeclaredType) {
  KVCacheConfig c;
  c.method = "kivi";
  EXPECT_FALSE(apply_field_assignment(c, "kivi_group_size=64").has_value());
  EXPECT_EQ(c.kivi.kivi_group_size, 64);
  EXPECT_FALSE(apply_field_assignment(c, "bit_width_inlier=2,3,4").has_value());
  EXPECT_EQ(c.bit_width_inlier, BitWidth(std::vector<int>{2, 3, 4}));
  EXPECT_FALSE(apply_field_assignment(c, "bit_width_inlier=3").has_value());
  EXPECT_EQ(c.bit_width_inlier, BitWidth(3));
  apply_field_assignment(c, "jl_dim=16");
  EXPECT_EQ(c.jl_dim, 16);
  apply_field_assignment(c, "jl_dim=");  // empty = None for optional fields
  EXPECT_FALSE(c.jl_dim.has_value());
  for (const char* yes : {"1", "true", "YES", "on"}) {
    c.spectral.spectral_apply_qjl = false;
    apply_field_assignment(c, std::string("spectral_apply_qjl=") + yes);
    EXPECT_TRUE(c.spectral.spectral_apply_qjl) << yes;
  }
  apply_field_assignment(c, "spectral_apply_qjl=off");
  EXPECT_FALSE(c.spectral.spectral_apply_qjl);
}

TEST(FieldAssignment, IrrelevantFieldWarnsUnknownFieldThrows) {
  KVCacheConfig c;  // turboquant_rvq
  const auto warning = apply_field_assignment(c, "kivi_group_size=16");
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("kivi_group_size"), std::string::npos);
  EXPECT_EQ(c.kivi.kivi_group_size, 16);  // stored all the same (issue #345: warning only)
  EXPECT_EQ(config_error([&] { apply_field_assignment(c, "no_such_field=1"); }),
            "unknown config field 'no_such_field' in --set no_such_field=1");
  EXPECT_NE(config_error([&] { apply_field_assignment(c, "method=kivi"); }).find("--method"), std::string::npos);
  EXPECT_EQ(config_error([&] { apply_field_assignment(c, "rvq_value_bits=abc"); }),
            "field 'rvq_value_bits' expects an integer, got 'abc'");
  EXPECT_EQ(config_error([&] { apply_field_assignment(c, "rvq_value_bits=12"); }),
            "rvq_value_bits must lie in [0, 8], got 12");
  EXPECT_NE(config_error([&] { apply_field_assignment(c, "seed"); }).find("FIELD=VALUE"), std::string::npos);
}

TEST(FieldAssignment, IntsOutsideTheMembersTypeAreRefusedNotNarrowed) {
  // 4294967298 = 2^32 + 2 would become 2 in an int; 4294967360 would become 64.
  KVCacheConfig c;
  EXPECT_EQ(config_error([&] { apply_field_assignment(c, "bit_width_inlier=4294967298"); }),
            "field 'bit_width_inlier' value 4294967298 is out of range (it holds -2147483648..2147483647)");
  EXPECT_NE(config_error([&] {
              apply_field_assignment(c, "bit_width_inlier=2,4294967300");
            }).find("4294967300 is out of range"),
            std::string::npos);
  EXPECT_NE(
      config_error([&] { apply_field_assignment(c, "h2o_budget=4294967360"); }).find("h2o_budget' value 4294967360"),
      std::string::npos);
  EXPECT_NE(config_error([&] { apply_field_assignment(c, "residual_length=-4294967296"); }).find("out of range"),
            std::string::npos);
  // Past int64 itself: still "out of range", not "expects an integer".
  EXPECT_NE(
      config_error([&] { apply_field_assignment(c, "residual_length=99999999999999999999"); }).find("out of range"),
      std::string::npos);
  EXPECT_EQ(c.bit_width_inlier.scalar(), KVCacheConfig{}.bit_width_inlier.scalar());  // nothing was written
  // The edge of int still parses (the bounds check names it afterwards, untruncated).
  EXPECT_EQ(config_error([&] { apply_field_assignment(c, "rvq_value_bits=2147483647"); }),
            "rvq_value_bits must lie in [0, 8], got 2147483647");
}

}  // namespace
}  // namespace veloxquant

namespace veloxquant {
namespace {

TEST(FieldSpecTypes, FloatFieldsParseFiniteNumbersOnly) {
  const FieldSpec decay = option_field("h2o_decay", &KVCacheConfig::h2o, &H2OOptions::h2o_decay, "decay");
  EXPECT_EQ(decay.type, FieldType::kFloat);
  EXPECT_EQ(field_type_name(decay.type), "float");
  EXPECT_EQ(std::get<double>(decay.default_value()), 0.98);
  EXPECT_EQ(field_value_to_string(decay.default_value()), "0.98");  // shortest round-trip text
  EXPECT_EQ(std::get<double>(parse_field_value(decay, " 0.5 ")), 0.5);
  EXPECT_EQ(std::get<double>(parse_field_value(decay, "1e-3")), 1e-3);
  for (const char* bad : {"", "abc", "0.5x", "nan", "inf"}) {
    EXPECT_THROW(parse_field_value(decay, bad), QuantizerConfigError) << bad;
  }
  KVCacheConfig config;
  decay.set(config, 0.25);
  EXPECT_EQ(config.h2o.h2o_decay, 0.25);
}

TEST(FieldSpecTypes, OptionalIntOptionFieldsTakeNone) {
  const FieldSpec resolved = option_field("pyramid_resolved_budget", &KVCacheConfig::pyramidkv,
                                          &PyramidKVOptions::pyramid_resolved_budget, "budget", 1);
  EXPECT_EQ(resolved.type, FieldType::kOptionalInt);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(resolved.default_value()));
  KVCacheConfig config;
  resolved.set(config, parse_field_value(resolved, "96"));
  EXPECT_EQ(config.pyramidkv.pyramid_resolved_budget, 96);
  resolved.set(config, parse_field_value(resolved, "None"));
  EXPECT_FALSE(config.pyramidkv.pyramid_resolved_budget.has_value());
}

}  // namespace
}  // namespace veloxquant
