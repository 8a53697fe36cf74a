// The proxy's instances file (`moengine proxy --config`): what it reads, and each mistake
// named with its line and field.
#include <gtest/gtest.h>

#include "core/error.h"
#include "proxy/instances_file.h"

namespace moe::proxy {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_instances_file(text, "i.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(InstancesFile, ReadsUrlsRolesNamesAndWeights) {
  const auto read = parse_instances_file(
      "instances:\n"
      "  - {url: http://10.0.0.5:8100, role: prefill, weight: 2}\n"
      "  - url: http://10.0.0.6:8200\n"
      "    role: decode\n"
      "    name: d0\n",
      "i.yaml");
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].name, "http://10.0.0.5:8100");
  EXPECT_EQ(read[0].role, InstanceRole::prefill);
  EXPECT_EQ(read[0].weight, 2.0);
  EXPECT_EQ(read[1].name, "d0");
  EXPECT_EQ(read[1].url, "http://10.0.0.6:8200");
  EXPECT_EQ(read[1].role, InstanceRole::decode);
  EXPECT_EQ(read[1].weight, 1.0);
}

TEST(InstancesFile, WhatItWritesReadsBack) {
  const std::vector<InstanceSpec> in{{"p 0", "http://[::1]:8100", InstanceRole::prefill, 0.5, "p"},
                                     {"u: 1", "http://h:1", InstanceRole::both, 3, ""}};
  const auto back = parse_instances_file(instances_file_text(in), "written");
  ASSERT_EQ(back.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back[i].name, in[i].name);
    EXPECT_EQ(back[i].url, in[i].url);
    EXPECT_EQ(back[i].role, in[i].role);
    EXPECT_EQ(back[i].weight, in[i].weight);
    EXPECT_EQ(back[i].group, in[i].group);
  }
}

TEST(InstancesFile, MistakesAreNamedWithTheirLineAndField) {
  EXPECT_EQ(error_of("instances:\n  - {url: http://a:1, role: prefill, wieght: 2}\n"),
            "i.yaml:2:38: instances[0].wieght: unknown key (expected one of url, role, name, weight, group)");
  EXPECT_EQ(error_of("instances:\n  - {role: decode}\n"), "i.yaml:2:5: instances[0].url: is required (http://HOST:PORT)");
  EXPECT_EQ(error_of("instances:\n  - {url: http://a:1, role: primary}\n"),
            "i.yaml:2:29: instances[0].role: 'primary' is not one of prefill, decode, both");
  EXPECT_EQ(error_of("instances:\n  - {url: https://a:1, role: decode}\n"),
            "i.yaml:2:11: instances[0].url: 'https://a:1': https is not supported; use plain http://");
  EXPECT_EQ(error_of("instances:\n  - {url: http://a:1, role: decode, weight: 0}\n"),
            "i.yaml:2:45: instances[0].weight: must be more than 0, got 0");
  EXPECT_EQ(error_of("instances:\n  - {url: http://a:1, role: decode}\n  - {url: http://a:1, role: prefill}\n"),
            "i.yaml:3:5: instances[1].name: 'http://a:1' names another instance already");
  EXPECT_EQ(error_of("instances: []\n"), "i.yaml:1:12: instances: must be a non-empty list of instances (each with a url and a role)");
  EXPECT_NE(error_of("instances: [\n").find("i.yaml:2:1: not valid YAML"), std::string::npos) << error_of("instances: [\n");
}

}  // namespace
}  // namespace moe::proxy
