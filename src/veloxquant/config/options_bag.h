#pragma once
// The options structs of methods that declare them in their own header (a new method's file
// set: options struct, cache, card — docs/architecture.md "Adding a method"). KVCacheConfig holds
// one OptionsBag, so adding a method never edits KVCacheConfig or method_options.h: the method's
// FieldSpecs (option_field over a bag member) and its cache read `config.options<KnormOptions>()`.
//
// Value semantics like the rest of KVCacheConfig: copying a config copies every struct in it
// (for_model copies the config per layer and changes some fields). A struct never set reads as
// its default-constructed value, which is the one place its defaults are declared.
#include <map>
#include <memory>
#include <typeindex>
#include <utility>

namespace veloxquant {

class OptionsBag {
 public:
  OptionsBag() = default;
  OptionsBag(const OptionsBag& other) { copy_from(other); }
  OptionsBag& operator=(const OptionsBag& other) {
    if (this != &other) {
      entries_.clear();
      copy_from(other);
    }
    return *this;
  }
  OptionsBag(OptionsBag&&) noexcept = default;
  OptionsBag& operator=(OptionsBag&&) noexcept = default;

  // The stored struct, or the defaults when none was set.
  template <class Options>
  const Options& get() const {
    const auto it = entries_.find(typeid(Options));
    if (it == entries_.end()) {
      static const Options defaults{};
      return defaults;
    }
    return static_cast<const Holder<Options>&>(*it->second).value;
  }

  // The stored struct, created from the defaults on first use.
  template <class Options>
  Options& get_mut() {
    std::unique_ptr<Entry>& entry = entries_[typeid(Options)];
    if (!entry) entry = std::make_unique<Holder<Options>>();
    return static_cast<Holder<Options>&>(*entry).value;
  }

 private:
  struct Entry {
    virtual ~Entry() = default;
    virtual std::unique_ptr<Entry> clone() const = 0;
  };
  template <class Options>
  struct Holder final : Entry {
    Options value{};
    std::unique_ptr<Entry> clone() const override { return std::make_unique<Holder>(*this); }
  };

  void copy_from(const OptionsBag& other) {
    for (const auto& [type, entry] : other.entries_) entries_.emplace(type, entry->clone());
  }

  std::map<std::type_index, std::unique_ptr<Entry>> entries_;
};

}  // namespace veloxquant
