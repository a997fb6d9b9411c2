#pragma once
// The public API of veloxquant in one include (the names VeloxQuant-MLX users know):
//   KVCacheConfig, QuantizerConfigError, STANDALONE_METHODS, KVCacheBuilder (build, for_model),
//   integration::patch_model_kv_cache, the method registry, and the cache classes.
#include "veloxquant/builder/kv_cache_builder.h"
#include "veloxquant/caches/kivi_cache.h"
#include "veloxquant/caches/polar_cache.h"
#include "veloxquant/caches/qjl_cache.h"
#include "veloxquant/caches/spectral_cache.h"
#include "veloxquant/caches/standalone_cache.h"
#include "veloxquant/caches/turboquant_rvq_cache.h"
#include "veloxquant/caches/turboquant_standalone_cache.h"
#include "veloxquant/config/bit_width.h"
#include "veloxquant/config/config_validation.h"
#include "veloxquant/config/field_spec.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/config/method_options.h"
#include "veloxquant/errors.h"
#include "veloxquant/integration/patch_model.h"
#include "veloxquant/registry/field_assignment.h"
#include "veloxquant/registry/method_descriptor.h"
#include "veloxquant/registry/method_registry.h"
#include "veloxquant/registry/method_report.h"
#include "veloxquant/version.h"
