/**
 * @file dsv4.hpp
 * Header-only C++17 wrapper of dsv4.h: RAII handles (move-only), statuses as
 * exceptions (dsv4::error, carrying the status and the library's message),
 * buffers as dsv4::span. Every function maps to the C call of the same name;
 * shapes, units, thread-safety and the state after each status are those of
 * dsv4.h (docs/api-guide.md). Compiled in CI with -Wall -Wextra -pedantic -Werror.
 *
 *   dsv4::engine eng = dsv4::engine::from_dir(dir);
 *   dsv4::tokenizer tok(dir);
 *   std::vector<int32_t> ids = tok.encode(text);
 *   ids.insert(ids.begin(), tok.bos());            // the model input starts with BOS
 *   dsv4::sequence seq = eng.new_sequence();
 *   int32_t next = seq.prefill(ids);
 *   next = seq.decode(next);
 *
 * @since 0.1
 */
#ifndef DSV4_HPP
#define DSV4_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsv4/dsv4.h"

/** C++ interface of libdsv4. @since 0.1 */
namespace dsv4 {

/** A failed libdsv4 call: status() is the dsv4_status, what() "call: STATUS: message". @since 0.1 */
class error : public std::runtime_error {
 public:
  /** @param status the call's status; @param call its name; @param message the library's message. */
  error(dsv4_status status, const char *call, const char *message)
      : std::runtime_error(std::string(call) + ": " + dsv4_status_string(status) +
                           (message && *message ? std::string(": ") + message : std::string())),
        status_(status) {}
  /** The dsv4_status of the failed call. */
  [[nodiscard]] dsv4_status status() const noexcept { return status_; }

 private:
  dsv4_status status_;
};

/** A view of a contiguous buffer (pointer and count), like C++20's std::span. @since 0.1 */
template <class T>
class span {
 public:
  /** An empty view (NULL for the C call: "not wanted"). */
  constexpr span() noexcept = default;
  /** n elements at p. */
  constexpr span(T *p, std::size_t n) noexcept : p_(p), n_(n) {}
  /** A vector's elements. */
  template <class U, class A>
  span(std::vector<U, A> &v) noexcept : p_(v.data()), n_(v.size()) {}
  /** A const vector's elements (for span<const T>). */
  template <class U, class A>
  span(const std::vector<U, A> &v) noexcept : p_(v.data()), n_(v.size()) {}
  /** An array's elements. */
  template <class U, std::size_t N>
  span(std::array<U, N> &a) noexcept : p_(a.data()), n_(N) {}
  /** A C array's elements. */
  template <std::size_t N>
  constexpr span(T (&a)[N]) noexcept : p_(a), n_(N) {}
  /** First element, or nullptr when empty. */
  [[nodiscard]] constexpr T *data() const noexcept { return p_; }
  /** Number of elements. */
  [[nodiscard]] constexpr std::size_t size() const noexcept { return n_; }
  /** Whether it has no element. */
  [[nodiscard]] constexpr bool empty() const noexcept { return n_ == 0; }

 private:
  T *p_ = nullptr;
  std::size_t n_ = 0;
};

namespace detail {
inline uint32_t decode_flags(bool skip_special) noexcept {
  return skip_special ? static_cast<uint32_t>(DSV4_DECODE_F_SKIP_SPECIAL) : 0u;
}
inline void check(dsv4_status s, const char *call, const char *message) {
  if (s != DSV4_OK) throw error(s, call, message);
}
template <class T, void (*Free)(T *)>
struct handle {
  T *p = nullptr;
  handle() = default;
  explicit handle(T *q) : p(q) {}
  handle(handle &&o) noexcept : p(std::exchange(o.p, nullptr)) {}
  handle &operator=(handle &&o) noexcept {
    if (this != &o) {
      Free(p);
      p = std::exchange(o.p, nullptr);
    }
    return *this;
  }
  handle(const handle &) = delete;
  handle &operator=(const handle &) = delete;
  ~handle() { Free(p); }
};
template <class S, dsv4_status (*Init)(S *, size_t)>
S initialized() {
  S s{};
  check(Init(&s, sizeof s), "params_init", dsv4_last_error());
  return s;
}
}  // namespace detail

/** dsv4_engine_params with the library's defaults, to change and pass on. @since 0.1 */
[[nodiscard]] inline dsv4_engine_params engine_params() {
  return detail::initialized<dsv4_engine_params, dsv4_engine_params_init>();
}
/** dsv4_sampling_params with the library's defaults (greedy). @since 0.1 */
[[nodiscard]] inline dsv4_sampling_params sampling_params() {
  return detail::initialized<dsv4_sampling_params, dsv4_sampling_params_init>();
}

/** A loaded checkpoint (dsv4_model_load); owned, freed by the destructor. @since 0.1 */
class model {
 public:
  /** Load `dir`; config_only reads config.json alone. Throws dsv4::error. */
  explicit model(const std::string &dir, bool config_only = false) {
    auto p = detail::initialized<dsv4_model_params, dsv4_model_params_init>();
    if (config_only) p.flags |= DSV4_MODEL_F_CONFIG_ONLY;
    dsv4_model *m = nullptr;
    detail::check(dsv4_model_load(dir.c_str(), &p, &m), "dsv4_model_load", dsv4_last_error());
    h_ = decltype(h_)(m);
  }
  /** The model's facts. */
  [[nodiscard]] dsv4_model_info info() const {
    dsv4_model_info i{};
    detail::check(dsv4_model_get_info(h_.p, &i, sizeof i), "dsv4_model_get_info",
                  dsv4_last_error());
    return i;
  }
  /** One row of the layer-role table. */
  [[nodiscard]] dsv4_layer_info layer(int32_t index) const {
    dsv4_layer_info i{};
    detail::check(dsv4_model_get_layer(h_.p, index, &i, sizeof i), "dsv4_model_get_layer",
                  dsv4_last_error());
    return i;
  }
  /** The C handle (borrowed). */
  [[nodiscard]] const dsv4_model *get() const noexcept { return h_.p; }

 private:
  detail::handle<dsv4_model, dsv4_model_free> h_;
};

/** tokenizer.json of a model directory (dsv4_tokenizer_load). @since 0.1 */
class tokenizer {
 public:
  /** Load `dir`/tokenizer.json. Throws dsv4::error. */
  explicit tokenizer(const std::string &dir) {
    dsv4_tokenizer *t = nullptr;
    detail::check(dsv4_tokenizer_load(dir.c_str(), &t), "dsv4_tokenizer_load", dsv4_last_error());
    h_ = decltype(h_)(t);
  }
  /** Ids of UTF-8 text, nothing added (a model input starts with bos()). */
  [[nodiscard]] std::vector<int32_t> encode(std::string_view text) const {
    std::vector<int32_t> ids(text.size() + 16);
    size_t n = 0;
    dsv4_status s = dsv4_tokenizer_encode(h_.p, text.data(), text.size(), ids.data(), ids.size(), &n);
    if (s == DSV4_ERR_INVALID_ARG && n > ids.size()) {
      ids.resize(n);
      s = dsv4_tokenizer_encode(h_.p, text.data(), text.size(), ids.data(), ids.size(), &n);
    }
    detail::check(s, "dsv4_tokenizer_encode", dsv4_last_error());
    ids.resize(n);
    return ids;
  }
  /** Text of ids (DSV4_DECODE_F_SKIP_SPECIAL with skip_special). */
  [[nodiscard]] std::string decode(span<const int32_t> ids, bool skip_special = false) const {
    const uint32_t flags = detail::decode_flags(skip_special);
    size_t n = 0;
    detail::check(dsv4_tokenizer_decode(h_.p, ids.data(), ids.size(), flags, nullptr, 0, &n),
                  "dsv4_tokenizer_decode", dsv4_last_error());
    std::string text(n + 1, '\0');
    detail::check(dsv4_tokenizer_decode(h_.p, ids.data(), ids.size(), flags, &text[0], n + 1, &n),
                  "dsv4_tokenizer_decode", dsv4_last_error());
    text.resize(n);
    return text;
  }
  /** Id of a special token (DSV4_TOKEN_*) or -1. */
  [[nodiscard]] int32_t special_id(int32_t kind) const noexcept {
    return dsv4_tokenizer_special_id(h_.p, kind);
  }
  /** The BOS id (or -1). */
  [[nodiscard]] int32_t bos() const noexcept { return special_id(DSV4_TOKEN_BOS); }
  /** The EOS id (or -1). */
  [[nodiscard]] int32_t eos() const noexcept { return special_id(DSV4_TOKEN_EOS); }
  /** 1 + the largest id. */
  [[nodiscard]] int32_t vocab_size() const noexcept { return dsv4_tokenizer_vocab_size(h_.p); }
  /** The C handle (borrowed). */
  [[nodiscard]] dsv4_tokenizer *get() const noexcept { return h_.p; }

 private:
  detail::handle<dsv4_tokenizer, dsv4_tokenizer_free> h_;
};

/** Incremental decoding (dsv4_tokenizer_stream_*); the tokenizer must outlive it. @since 0.1 */
class token_stream {
 public:
  /** A stream of `tok` (DSV4_DECODE_F_SKIP_SPECIAL with skip_special). */
  explicit token_stream(const tokenizer &tok, bool skip_special = false) {
    dsv4_tokenizer_stream *st = nullptr;
    detail::check(dsv4_tokenizer_stream_create(tok.get(), detail::decode_flags(skip_special), &st),
                  "dsv4_tokenizer_stream_create", dsv4_last_error());
    h_ = decltype(h_)(st);
  }
  /** The text `id` completes (maybe empty); valid until the next call. */
  [[nodiscard]] std::string_view push(int32_t id) {
    const char *t = nullptr;
    size_t n = 0;
    detail::check(dsv4_tokenizer_stream_push(h_.p, id, &t, &n), "dsv4_tokenizer_stream_push",
                  dsv4_last_error());
    return {t, n};
  }
  /** Everything held back; the stream starts over. */
  [[nodiscard]] std::string_view flush() {
    const char *t = nullptr;
    size_t n = 0;
    detail::check(dsv4_tokenizer_stream_flush(h_.p, &t, &n), "dsv4_tokenizer_stream_flush",
                  dsv4_last_error());
    return {t, n};
  }

 private:
  detail::handle<dsv4_tokenizer_stream, dsv4_tokenizer_stream_free> h_;
};

class engine;

/** A sequence of an engine; freed by the destructor. Must not outlive its engine. @since 0.1 */
class sequence {
 public:
  /** Take over o's sequence (o is left empty). */
  sequence(sequence &&o) noexcept : e_(std::exchange(o.e_, nullptr)), id_(std::exchange(o.id_, 0)) {}
  /** Free this sequence, then take over o's. */
  sequence &operator=(sequence &&o) noexcept {
    if (this != &o) {
      release();
      e_ = std::exchange(o.e_, nullptr);
      id_ = std::exchange(o.id_, 0);
    }
    return *this;
  }
  sequence(const sequence &) = delete;
  sequence &operator=(const sequence &) = delete;
  /** Free the sequence (dsv4_engine_seq_free; its status is ignored). */
  ~sequence() { release(); }

  /** The library's sequence id. */
  [[nodiscard]] int64_t id() const noexcept { return id_; }
  /** Positions held. */
  [[nodiscard]] int64_t length() const {
    int64_t n = 0;
    detail::check(dsv4_engine_seq_length(e_, id_, &n), "dsv4_engine_seq_length", dsv4_last_error());
    return n;
  }
  /** Append prompt tokens; returns the token sampled after them. logits: float[vocab] or empty. */
  int32_t prefill(span<const int32_t> tokens, span<float> logits = {},
                  const dsv4_sampling_params *sampling = nullptr) {
    int32_t next = -1;
    detail::check(dsv4_engine_prefill(e_, id_, tokens.data(), static_cast<int64_t>(tokens.size()),
                                      sampling, logits.data(), &next),
                  "dsv4_engine_prefill", dsv4_last_error());
    return next;
  }
  /** Feed one token; returns the next. logits: float[vocab] or empty. */
  int32_t decode(int32_t token, span<float> logits = {}, const dsv4_sampling_params *sampling = nullptr) {
    int32_t next = -1;
    detail::check(dsv4_engine_decode(e_, 1, &id_, &token, sampling, logits.data(), &next),
                  "dsv4_engine_decode", dsv4_last_error());
    return next;
  }
  /** A new sequence holding this one's positions, caches and sampler state. */
  [[nodiscard]] sequence fork() const {
    int64_t child = 0;
    detail::check(dsv4_engine_seq_fork(e_, id_, &child), "dsv4_engine_seq_fork", dsv4_last_error());
    return sequence(e_, child);
  }

 private:
  friend class engine;
  sequence(dsv4_engine *e, int64_t id) noexcept : e_(e), id_(id) {}
  void release() noexcept {
    if (e_ && id_) (void)dsv4_engine_seq_free(e_, id_);
    id_ = 0;
  }
  dsv4_engine *e_ = nullptr;
  int64_t id_ = 0;
};

/** An inference engine (dsv4_engine_create*); owned, freed by the destructor. @since 0.1 */
class engine {
 public:
  /** An engine over `m` (borrowed: it must outlive the engine). Throws dsv4::error. */
  explicit engine(const model &m, const dsv4_engine_params &params = engine_params()) {
    dsv4_engine *e = nullptr;
    detail::check(dsv4_engine_create(m.get(), &params, &e), "dsv4_engine_create", dsv4_last_error());
    h_ = decltype(h_)(e);
  }
  /** An engine that loads and owns the checkpoint `dir`. Throws dsv4::error. */
  [[nodiscard]] static engine from_dir(const std::string &dir,
                                       const dsv4_engine_params &params = engine_params()) {
    dsv4_engine *e = nullptr;
    detail::check(dsv4_engine_create_from_dir(dir.c_str(), &params, &e), "dsv4_engine_create_from_dir",
                  dsv4_last_error());
    return engine(e);
  }
  /** Memory plan and use. */
  [[nodiscard]] dsv4_engine_info info() const {
    dsv4_engine_info i{};
    detail::check(dsv4_engine_get_info(h_.p, &i, sizeof i), "dsv4_engine_get_info", dsv4_last_error());
    return i;
  }
  /** The model's facts. */
  [[nodiscard]] dsv4_model_info model_info() const {
    dsv4_model_info i{};
    detail::check(dsv4_model_get_info(dsv4_engine_model(h_.p), &i, sizeof i), "dsv4_model_get_info",
                  dsv4_last_error());
    return i;
  }
  /** A new empty sequence. */
  [[nodiscard]] sequence new_sequence() {
    int64_t id = 0;
    detail::check(dsv4_engine_seq_create(h_.p, &id), "dsv4_engine_seq_create", dsv4_last_error());
    return sequence(h_.p, id);
  }
  /**
   * One decode step for a batch: ids[i] takes tokens[i]; sampled[i] receives the
   * next token; logits, when not empty, float[n][vocab]. All spans hold n entries.
   */
  void decode(span<const int64_t> ids, span<const int32_t> tokens, span<int32_t> sampled,
              span<float> logits = {}, const dsv4_sampling_params *sampling = nullptr) {
    if (tokens.size() != ids.size() || sampled.size() != ids.size())
      throw error(DSV4_ERR_INVALID_ARG, "dsv4_engine_decode", "ids, tokens and sampled differ in size");
    detail::check(dsv4_engine_decode(h_.p, static_cast<int32_t>(ids.size()), ids.data(), tokens.data(),
                                     sampling, logits.data(), sampled.data()),
                  "dsv4_engine_decode", dsv4_last_error());
  }
  /** The C handle (borrowed). */
  [[nodiscard]] dsv4_engine *get() const noexcept { return h_.p; }

 private:
  explicit engine(dsv4_engine *e) : h_(e) {}
  detail::handle<dsv4_engine, dsv4_engine_free> h_;
};

}  // namespace dsv4

#endif /* DSV4_HPP */
