#include "protocol/enum_range.hpp"

#include <flatbuffers/minireflect.h>
#include <wsync/schemas/control_generated.h>

#include <algorithm>
#include <cstddef>
#include <unordered_map>
#include <vector>

namespace wsync::bus::detail {
namespace {

namespace fb = flatbuffers;

// The walk is driven by the mini-reflection type tables that flatc generates (--reflect-names), but not by
// flatbuffers::IterateFlatBuffer: that visits every field and every vector element through virtual calls, every byte
// of a TransferPlan's NCCL id and every entry of a manifest of tens of thousands of tensors. Here each type
// is reduced once to the fields that can hold an enum value (enum fields, vectors of enums, and tables, structs and
// unions that contain such fields), and the walk visits only those.

struct Plan;

// One field of a table or struct that the walk visits.
struct FieldCheck {
  std::size_t index = 0;         // in the type table; a table field's vtable slot follows from it
  std::size_t structOffset = 0;  // a struct's field: its byte offset in the struct
  fb::ElementaryType elementType = fb::ET_UTYPE;
  bool repeated = false;                    // a vector (table) or a fixed-length array (struct)
  std::size_t arrayLength = 0;              // a struct's array: its length
  const fb::TypeTable* enumType = nullptr;  // an enum field: its enum
  const Plan* child = nullptr;              // a table, struct or union field: what to check inside it
  const char* name = "?";
};

// What to check in one table, struct or union type.
struct Plan {
  const fb::TypeTable* type = nullptr;
  bool holdsEnums = false;           // some field, at any depth, is an enum
  std::vector<FieldCheck> fields;    // tables and structs
  std::vector<const Plan*> members;  // unions: by member index; nullptr where there is nothing to check
};

bool isEnumField(const fb::TypeCode& code, const fb::TypeTable* ref) {
  // A union's type tag refers to the union's table, not to an enum; it is read with the union's value.
  return ref->st == fb::ST_ENUM && code.base_type != fb::ET_UTYPE;
}

// Every table, struct and union reachable from the root, each reduced to its checks. Built once, then read-only,
// so decoding threads share it.
class Plans {
 public:
  explicit Plans(const fb::TypeTable* root) : root_(root) {
    collect(root);
    settleWhichHoldEnums();
    for (auto& entry : plans_) build(entry.second);
  }

  const Plan& root() const { return plans_.at(root_); }

 private:
  static const fb::TypeTable* referenced(const fb::TypeTable* type, std::size_t field) {
    const fb::TypeCode code = type->type_codes[field];
    return code.sequence_ref < 0 ? nullptr : type->type_refs[code.sequence_ref]();
  }

  void collect(const fb::TypeTable* type) {
    auto [entry, added] = plans_.try_emplace(type);
    if (!added) return;
    entry->second.type = type;
    for (std::size_t field = 0; field < type->num_elems; ++field) {
      const fb::TypeTable* ref = referenced(type, field);
      if (ref != nullptr && ref->st != fb::ST_ENUM) collect(ref);
    }
  }

  // A fixed point, so that recursive types settle too.
  void settleWhichHoldEnums() {
    for (bool changed = true; changed;) {
      changed = false;
      for (auto& [type, plan] : plans_) {
        if (plan.holdsEnums) continue;
        for (std::size_t field = 0; field < type->num_elems && !plan.holdsEnums; ++field) {
          const fb::TypeTable* ref = referenced(type, field);
          if (ref == nullptr) continue;
          plan.holdsEnums =
              isEnumField(type->type_codes[field], ref) || (ref->st != fb::ST_ENUM && plans_.at(ref).holdsEnums);
        }
        changed = changed || plan.holdsEnums;
      }
    }
  }

  void build(Plan& plan) {
    const fb::TypeTable* type = plan.type;
    if (type->st == fb::ST_UNION) {
      plan.members.assign(type->num_elems, nullptr);
      for (std::size_t member = 0; member < type->num_elems; ++member) {
        const fb::TypeTable* ref = referenced(type, member);  // none for NONE
        if (ref != nullptr && ref->st == fb::ST_TABLE && plans_.at(ref).holdsEnums) {
          plan.members[member] = &plans_.at(ref);
        }
      }
      return;
    }
    std::size_t arrays = 0;  // a struct's arrays take their lengths from array_sizes, in field order
    for (std::size_t field = 0; field < type->num_elems; ++field) {
      const fb::TypeCode code = type->type_codes[field];
      FieldCheck check;
      check.index = field;
      check.elementType = static_cast<fb::ElementaryType>(code.base_type);
      check.repeated = code.is_repeating != 0;
      if (type->st == fb::ST_STRUCT) {
        check.structOffset = static_cast<std::size_t>(type->values[field]);
        if (check.repeated) check.arrayLength = static_cast<std::size_t>(type->array_sizes[arrays++]);
      }
      if (type->names != nullptr) check.name = type->names[field];
      const fb::TypeTable* ref = referenced(type, field);
      if (ref == nullptr || code.base_type == fb::ET_UTYPE) continue;
      if (isEnumField(code, ref)) {
        check.enumType = ref;
      } else if (plans_.at(ref).holdsEnums) {
        check.child = &plans_.at(ref);
      } else {
        continue;
      }
      plan.fields.push_back(check);
    }
  }

  const fb::TypeTable* root_;
  std::unordered_map<const fb::TypeTable*, Plan> plans_;  // node-based: the Plan* in checks stay valid
};

const Plans& envelopePlans() {
  static const Plans plans(msg::EnvelopeTypeTable());
  return plans;
}

// "Abort, Wait, Keep (0..2)" for an enum numbered from 0 without gaps (flatc then leaves the values out), else
// "M = -3, N = 5".
std::string declaredValues(const fb::TypeTable& type) {
  std::string text;
  for (std::size_t i = 0; i < type.num_elems; ++i) {
    if (i != 0) text += ", ";
    text += type.names != nullptr ? type.names[i] : "?";
    if (type.values != nullptr) text += " = " + std::to_string(type.values[i]);
  }
  if (type.values == nullptr && type.num_elems > 0) text += " (0.." + std::to_string(type.num_elems - 1) + ")";
  return text;
}

// One walk of one verified buffer. With a description to fill, the first value out of range is described as the
// recursion unwinds: the leaf writes " = 200 is not one of ...", each level puts its field in front, and a union's
// member ("ControlRequest") names the path from there on, since every message is an Envelope.
class Walk {
 public:
  explicit Walk(std::string* description) : description_(description) {}

  bool envelope(const std::uint8_t* buffer) {
    if (checkObject(fb::GetRoot<std::uint8_t>(buffer), envelopePlans().root())) return true;
    prepend("Envelope");
    return false;
  }

 private:
  // A table or a struct, from its start.
  bool checkObject(const std::uint8_t* start, const Plan& plan) {
    for (const FieldCheck& check : plan.fields) {
      if (!checkField(start, plan, check)) return false;
    }
    return true;
  }

  bool checkField(const std::uint8_t* start, const Plan& plan, const FieldCheck& check) {
    const bool inTable = plan.type->st == fb::ST_TABLE;
    const auto* table = reinterpret_cast<const fb::Table*>(start);
    const std::uint8_t* at = inTable
                                 ? table->GetAddressOf(fb::FieldIndexToOffset(static_cast<fb::voffset_t>(check.index)))
                                 : start + check.structOffset;
    if (at == nullptr) return true;  // absent: its default, which flatc requires to be declared

    if (check.child != nullptr && check.child->type->st == fb::ST_UNION) {
      // The type tag is the field just before the value (Verifier: present together, vectors of equal length).
      const std::uint8_t* tags =
          table->GetAddressOf(fb::FieldIndexToOffset(static_cast<fb::voffset_t>(check.index - 1)));
      if (!check.repeated) {
        return checkUnion(tags != nullptr ? fb::ReadScalar<std::uint8_t>(tags) : 0, at, *check.child);
      }
      if (tags == nullptr) return true;
      const auto* tagVector =
          reinterpret_cast<const fb::Vector<std::uint8_t>*>(tags + fb::ReadScalar<fb::uoffset_t>(tags));
      const auto* values = reinterpret_cast<const fb::Vector<fb::uoffset_t>*>(at + fb::ReadScalar<fb::uoffset_t>(at));
      const std::size_t count = std::min<std::size_t>(tagVector->size(), values->size());
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint8_t* slot = values->Data() + i * sizeof(fb::uoffset_t);
        if (!checkUnion(tagVector->Get(static_cast<fb::uoffset_t>(i)), slot, *check.child)) {
          prepend("[" + std::to_string(i) + "]");
          return false;
        }
      }
      return true;
    }

    if (!check.repeated) {
      if (checkElement(at, check)) return true;
      prepend(std::string(".") + check.name);
      return false;
    }
    const std::uint8_t* elements = at;
    std::size_t count = check.arrayLength;
    if (inTable) {
      const std::uint8_t* vector = at + fb::ReadScalar<fb::uoffset_t>(at);
      count = fb::ReadScalar<fb::uoffset_t>(vector);
      elements = vector + sizeof(fb::uoffset_t);
    }
    const std::size_t stride = fb::InlineSize(check.elementType, check.child != nullptr ? check.child->type : nullptr);
    for (std::size_t i = 0; i < count; ++i) {
      if (!checkElement(elements + i * stride, check)) {
        prepend(std::string(".") + check.name + "[" + std::to_string(i) + "]");
        return false;
      }
    }
    return true;
  }

  // One value in place: an enum scalar, a table's offset, or an inline struct.
  bool checkElement(const std::uint8_t* at, const FieldCheck& check) {
    if (check.enumType != nullptr) return checkEnum(at, check.elementType, *check.enumType);
    if (check.child->type->st == fb::ST_STRUCT) return checkObject(at, *check.child);
    return checkObject(at + fb::ReadScalar<fb::uoffset_t>(at), *check.child);
  }

  bool checkUnion(std::uint8_t tag, const std::uint8_t* offset, const Plan& plan) {
    // NONE and members a newer build appended have no plan: an unknown member's layout is not known here.
    const std::int64_t member = fb::LookupEnum(tag, plan.type->values, plan.type->num_elems);
    if (member < 0 || static_cast<std::size_t>(member) >= plan.members.size()) return true;
    const Plan* memberPlan = plan.members[static_cast<std::size_t>(member)];
    if (memberPlan == nullptr) return true;
    if (checkObject(offset + fb::ReadScalar<fb::uoffset_t>(offset), *memberPlan)) return true;
    if (description_ != nullptr && !pathComplete_) {
      prepend(plan.type->names != nullptr ? plan.type->names[member] : "?");
      pathComplete_ = true;
    }
    return false;
  }

  bool checkEnum(const std::uint8_t* at, fb::ElementaryType type, const fb::TypeTable& enumType) {
    std::int64_t value = 0;
    std::string text;  // filled only for a description
    switch (type) {
      case fb::ET_CHAR:
        value = fb::ReadScalar<std::int8_t>(at);
        break;
      case fb::ET_UCHAR:
        value = fb::ReadScalar<std::uint8_t>(at);
        break;
      case fb::ET_SHORT:
        value = fb::ReadScalar<std::int16_t>(at);
        break;
      case fb::ET_USHORT:
        value = fb::ReadScalar<std::uint16_t>(at);
        break;
      case fb::ET_INT:
        value = fb::ReadScalar<std::int32_t>(at);
        break;
      case fb::ET_UINT:
        value = fb::ReadScalar<std::uint32_t>(at);
        break;
      case fb::ET_LONG:
        value = fb::ReadScalar<std::int64_t>(at);
        break;
      case fb::ET_ULONG: {
        // flatc writes a ulong enum's values as the int64 of the same bits; compared alike here.
        const auto bits = fb::ReadScalar<std::uint64_t>(at);
        value = static_cast<std::int64_t>(bits);
        if (description_ != nullptr) text = std::to_string(bits);
        break;
      }
      default:
        return true;  // no other type can be an enum's
    }
    const std::int64_t index = fb::LookupEnum(value, enumType.values, enumType.num_elems);
    if (index >= 0 && index < static_cast<std::int64_t>(enumType.num_elems)) return true;
    if (description_ != nullptr) {
      if (text.empty()) text = std::to_string(value);
      *description_ = " = " + text + " is not one of " + declaredValues(enumType);
    }
    return false;
  }

  void prepend(const std::string& step) {
    if (description_ != nullptr && !pathComplete_) description_->insert(0, step);
  }

  std::string* description_;
  bool pathComplete_ = false;
};

}  // namespace

bool enumsInRange(const std::uint8_t* envelope) { return Walk(nullptr).envelope(envelope); }

std::string describeFirstEnumOutOfRange(const std::uint8_t* envelope) {
  std::string description;
  if (Walk(&description).envelope(envelope)) return {};
  return description;
}

}  // namespace wsync::bus::detail
