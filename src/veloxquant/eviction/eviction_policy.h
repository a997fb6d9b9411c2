#pragma once
// Which rows one (batch, kv head) keeps after a call (spec §2.3, §6 rows 20-24): the candidates
// are the rows stored by earlier calls followed by the call's new rows, in temporal order; the
// policy returns the kept ones. The caller returns every candidate to attention for this call
// (deferred eviction) and stores only the kept ones, so a multi-token call evicts exactly as
// the same tokens fed one at a time would (for the per-token policies).
//
//   kRecentWindow        streaming_llm: sinks + the newest budget - sinks rows.
//   kAttentionScored     the "H2O-scorer", token by token: every live row's score becomes
//                        score * decay + w (accumulate; h2o, pyramidkv) or w (tova), w = the
//                        token's attention weights over the live rows *and itself* (softmax of
//                        the query — or the key-as-query proxy — against every live key); the
//                        new row's score is its own weight. Over budget: evict the argmin
//                        (first minimum) outside the sinks and the newest `protect_recent` rows.
//                        Variants: max_combine keeps max(score, w) (kvzip: the most attention a
//                        row ever received from a probe); noise adds tau(t) * Gumbel(seed, position)
//                        to the score when ranking victims (keyformer).
//                        merge (cam): the victim's value (and key, merge_keys) is blended into the
//                        live row whose key is most cosine-similar to the victim's, after a
//                        Bernoulli gate min(1, victim score / target score) seeded per position.
//                        chunk_size > 1 (chunkkv): past the budget a whole chunk goes — positions
//                        [c*i, c*(i+1)), every member live and outside the sinks and the
//                        protected rows — the one with the lowest mean score (the first such);
//                        the cache then holds budget + 1 - c rows until it fills again.
//   kKeyNorm             knorm: a row's score is fixed when it arrives, -||k|| (keep low norms:
//                        low-norm keys draw attention) or +||k|| (keep high); over budget evict
//                        the argmin outside the sinks and the newest `protect_recent` rows.
//   kRecentVotes         morphkv: at every token the newest obs_window live rows vote: each one's
//                        query (a new token of the call: its real queries or the proxy; an
//                        earlier, stored row: its key, the original's key-as-query) attends
//                        causally over the live rows, and a row's score is the sum of the votes
//                        it gets — recomputed every token, nothing carried. Over budget evict the
//                        argmin outside the sinks and the newest obs_window - 1 rows (the voters
//                        of the next token); obs_window 1 is TOVA.
//   kDirection           qfilters: once the first min(calib_tokens, budget + 1) tokens are in, each
//                        head fixes a direction u, the top right singular vector of their keys
//                        (oriented so that their mean projection is >= 0); every row's score is
//                        then direction_sign * <k, u>, fixed, and the per-token loop evicts the
//                        argmin outside the sinks and the newest `protect_recent` rows. The
//                        direction is per-head state (EvictionCache::policy_state).
//   kLeverage            curdkv: per token, the rows' value-aware leverage — row j of the block
//                        M = diag(w) V (w the token's attention weights over the rows stored
//                        before it, V their values) projected on M's top rank_cap right singular
//                        directions, energy-weighted, normalised to sum 1
//                        (leverage_scores.h) — adds to each stored row's score; the new row
//                        starts at its own leverage within stored + itself (the very first
//                        token: 1). Victims are ranked by the mean per step, score / (1 + step -
//                        position), the first minimum outside the sinks.
//   kAnchors             nestedkv: every call scores all candidates afresh by their keys' anomaly
//                        against three anchors — the mean of all keys, of the key's block, of
//                        the window before it (anchor_scores.h) — and keeps the sinks and the
//                        best-scored rest up to the budget. Nothing is carried between calls.
//   kObservationWindow   snapkv: a chunk of several tokens (prefill) lets its last obs_window
//                        tokens vote, pooled over neighbouring rows (the votes replace the
//                        carried scores); keep the sinks, the window and the best-voted rest. A single token (decode)
//                        scores like kAttentionScored (accumulated, the newest obs_window rows protected).
// Sinks are the rows whose true position is below n_sink (the first positions, never evicted).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace veloxquant::eviction {

struct EvictionPolicy {
  enum class Kind {
    kRecentWindow,
    kAttentionScored,
    kObservationWindow,
    kKeyNorm,
    kRecentVotes,
    kDirection,
    kLeverage,
    kAnchors
  };
  Kind kind = Kind::kAttentionScored;
  int64_t budget = 512;
  int64_t n_sink = 4;
  int64_t protect_recent = 0;  // h2o_grace; snapkv: the observation window at decode
  double decay = 1.0;          // h2o_decay
  bool accumulate = true;      // false: tova
  int64_t obs_window = 0;      // snapkv; morphkv: the voting window
  int64_t pool_kernel = 1;     // snapkv: average pooling of the votes over neighbouring rows
  bool max_combine = false;    // kvzip: score = max(score, w) instead of score * decay + w
  int key_norm_sign = -1;      // knorm: -1 keeps low key norms, +1 high
  // keyformer's ranking noise: tau(t) = tau_init + (tau_end - tau_init) * min(1, t / anneal_steps)
  // at the step feeding position t (anneal_steps 0: tau_end); tau 0 everywhere = no noise.
  double noise_tau_init = 0.0;
  double noise_tau_end = 0.0;
  int64_t noise_anneal_steps = 0;
  uint64_t noise_seed = 0;
  // cam: how an evicted row is merged into its most similar survivor (kNone: dropped).
  enum class Merge { kNone, kSimWeighted, kMean };
  Merge merge = Merge::kNone;
  bool merge_keys = false;
  bool merge_gate = true;
  uint64_t merge_seed = 0;
  int64_t chunk_size = 1;    // chunkkv: rows evicted together (1: one row, the others)
  int64_t calib_tokens = 0;  // qfilters: tokens whose keys fix the direction
  int direction_sign = 1;    // qfilters: +1 keeps keys along u, -1 against it
  // qfilters: when budget / tokens fed first drops below min_retention (0: never checked), warn
  // once per process, raise (QuantizerConfigError from the update) or ignore.
  enum class LowRetention { kWarn, kRaise, kIgnore };
  double min_retention = 0.0;
  LowRetention on_low_retention = LowRetention::kWarn;
  int64_t rank_cap = 16;  // curdkv: singular directions of the leverage estimate
  // nestedkv: the recent anchor's window, the head blend's sharpness beta, the surprise gate's
  // threshold tau and steepness kappa.
  int64_t anchor_window = 64;
  double anchor_beta = 3.0;
  double anchor_tau = 0.6;
  double anchor_kappa = 10.0;

  // Whether rows carry a score between calls (nestedkv scores every call afresh).
  bool uses_scores() const { return kind != Kind::kRecentWindow && kind != Kind::kAnchors; }
  // Whether scores come from attention weights (so real queries help).
  bool uses_attention() const {
    return kind == Kind::kAttentionScored || kind == Kind::kObservationWindow || kind == Kind::kRecentVotes ||
           kind == Kind::kLeverage;
  }
  // Whether a chunk of tokens leaves what the same tokens fed one at a time leave (snapkv and
  // nestedkv score a whole call at once).
  bool per_token() const { return kind != Kind::kObservationWindow && kind != Kind::kAnchors; }
  // Whether the selection reads every candidate's value (cam merges values, curdkv scores them).
  bool needs_values() const { return merges() || kind == Kind::kLeverage; }
  // Policies the fused decode step's single-row shortcut cannot run (it neither decodes the
  // survivors' keys nor re-scores them): the cache takes the general selection for them.
  bool needs_general_selection() const {
    return merges() || kind == Kind::kRecentVotes || kind == Kind::kDirection || kind == Kind::kLeverage ||
           kind == Kind::kAnchors || chunk_size > 1;
  }
  // Floats of per-(batch, head) state the policy keeps besides the rows (qfilters: the direction
  // and a calibrated flag), for keys of dimension `dim`.
  int64_t state_floats(int64_t dim) const { return kind == Kind::kDirection ? dim + 1 : 0; }
  // The number of first tokens whose keys calibrate kDirection's direction.
  int64_t calibration_window() const { return std::min(calib_tokens, budget + 1); }
  // How many rows one eviction removes: a full cache holds between budget + 1 - this and budget.
  int64_t rows_evicted_at_once() const { return chunk_size; }
  // A live row's new score after a step that gave it attention weight w.
  float updated_score(float carried, float weight) const;
  // updated_score for n rows at once (out may be carried): one loop per rule, no call per row.
  void update_scores(const float* carried, const float* weights, int64_t n, float* out) const;
  // The same for rows scattered in `scores`: scores[rows[j]] updated with weights[j], j < n.
  void update_scores_at(float* scores, const int32_t* rows, const float* weights, int64_t n) const;
  // The score a new row starts with: its own weight, or its key's signed norm (kKeyNorm).
  float arrival_score(const float* key, int64_t dim, float own_weight) const;
  // What victims are ranked by at the step feeding position `step`: the score, plus the noise;
  // kLeverage: the score per step the row has been scored, score / (1 + step - position).
  float rank(float score, int32_t position, int64_t step) const;
  bool has_noise() const { return noise_tau_init != 0.0 || noise_tau_end != 0.0; }
  bool merges() const { return merge != Merge::kNone; }

  // protect_recent limited so that at least one row stays evictable past the sinks.
  int64_t effective_protect() const;

 private:
  // Calls body(combine) once, combine(carried, weight) being this policy's score rule as a lambda
  // of its own type: the one place the rule is written, and a loop over rows inside body is
  // compiled per rule (no branch or call per row).
  template <class Body>
  void with_score_rule(Body&& body) const {
    if (!accumulate) {
      body([](float, float weight) { return weight; });
    } else if (max_combine) {
      body([](float carried, float weight) { return std::max(carried, weight); });
    } else {
      const double d = decay;
      body([d](float carried, float weight) { return static_cast<float>(carried * d + weight); });
    }
  }
};

const char* policy_kind_name(EvictionPolicy::Kind kind);
EvictionPolicy::Kind parse_policy_kind(const std::string& name);  // throws base::FormatError

// A uniform sample in (0, 1) that depends only on (seed, position) (keyformer's noise, cam's gate).
double uniform_noise(uint64_t seed, int32_t position);
// keyformer's frozen noise: a standard Gumbel sample that depends only on (seed, position).
float gumbel_noise(uint64_t seed, int32_t position);
const char* merge_name(EvictionPolicy::Merge merge);
EvictionPolicy::Merge parse_merge(const std::string& name);  // throws base::FormatError

// One (batch, kv head) of one call.
struct Candidates {
  int64_t stored = 0;  // rows kept from earlier calls (the first candidates)
  int64_t dim = 0;
  std::vector<float> keys;  // candidates x dim, f32 (stored rows decoded)
  std::vector<int32_t> positions;
  std::vector<float> scores;  // stored rows: carried scores; new rows: 0 on entry
  // Policies that read values (needs_values: cam, curdkv): every candidate's value (candidates x
  // value_dim, f32); merging policies (cam) also mark which stored candidates they changed
  // (their rows must be re-encoded).
  int64_t value_dim = 0;
  std::vector<float> values;
  std::vector<char> modified;
  // Policies with per-head state (state_floats > 0): this head's state, read and updated.
  float* head_state = nullptr;
  int64_t count() const { return static_cast<int64_t>(positions.size()); }
};

// The query vectors of new token `token` (0-based within the call) into `out` (n x dim);
// returns n: 1 for the key-as-query proxy, the GQA group size for real queries.
using QuerySource = std::function<int64_t(int64_t token, std::vector<float>& out)>;

// A lower budget for rows already stored (squeeze's schedule, applied after the prefill): the
// candidates (all stored, c.stored == c.count()) kept under policy.budget — the sinks, the newest
// effective_protect() rows and the best-ranked rest, the rows the per-token rule would evict
// first (lowest rank, the earlier of equals) going first — strictly increasing.
std::vector<int32_t> shrink_rows(const EvictionPolicy& policy, const Candidates& c);

// Kept candidate indices, strictly increasing, at most policy.budget of them; c.scores holds
// the scores to store for them. `scale` multiplies the logits (1/sqrt(d)).
std::vector<int32_t> select_rows(const EvictionPolicy& policy, Candidates& c, const QuerySource& queries, float scale);
// The same into `kept` (cleared first): a reused vector makes a decode step allocation-free.
void select_rows(const EvictionPolicy& policy, Candidates& c, const QuerySource& queries, float scale,
                 std::vector<int32_t>& kept);

}  // namespace veloxquant::eviction
