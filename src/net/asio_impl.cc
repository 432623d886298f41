// The one translation unit that compiles Asio (BOOST_ASIO_SEPARATE_COMPILATION).
#include <utility>

#include <boost/asio/impl/src.hpp>
