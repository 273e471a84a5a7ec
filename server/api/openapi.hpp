// The OpenAPI 3.0 document of the admin API, served at /api/v1/openapi.json. Its source is
// server/api/openapi.json, embedded at build time; a test checks that its paths and
// methods are exactly the router's routes.
#pragma once

#include <string_view>

namespace fedcore::api {

std::string_view openapi_document() noexcept;

}  // namespace fedcore::api
