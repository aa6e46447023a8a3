// ImageMeta <-> kcache.v1.Image: the one conversion the service (replies) and the worker
// protocol (results) share.
#pragma once

#include "image.hpp"
#include "kcache/expected.hpp"
#include "kcache/v1/kcache.pb.h"

namespace kcache::server {

void to_proto(const ImageMeta& meta, v1::Image& out);

// An image from its proto form with its data; INTERNAL when the metadata does not describe the
// data (size, digest, kind), since only a broken peer sends that.
Expected<Image> image_from_proto(v1::Image&& proto);

}  // namespace kcache::server
